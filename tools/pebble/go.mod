module github.com/tunnelsvc/tunnelsvc/tools/pebble

go 1.26.8

require github.com/letsencrypt/pebble/v2 v2.6.0

require (
	github.com/go-jose/go-jose/v4 v4.0.1 // indirect
	github.com/letsencrypt/challtestsrv v1.3.2 // indirect
	github.com/miekg/dns v1.1.58 // indirect
	golang.org/x/crypto v0.21.0 // indirect
	golang.org/x/mod v0.15.0 // indirect
	golang.org/x/net v0.23.0 // indirect
	golang.org/x/sys v0.18.0 // indirect
	golang.org/x/tools v0.18.0 // indirect
)
