module github.com/nbutton23/zxcvbn-go

go 1.24
