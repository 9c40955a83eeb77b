package testutil

import (
	"flag"
	"regexp"
	"sync/atomic"
)

var sampled atomic.Int64

// RealToolSample says whether a renderer's fuzz target should also check
// this input with the real tool, which takes tens of milliseconds or more:
// always in a plain `go test` run (the committed seed corpus, hostile
// inputs included), and one input in every `every` while fuzzing, where
// the structural check (Shape) covers the rest.
func RealToolSample(every int64) bool {
	if f := flag.Lookup("test.fuzz"); f == nil || f.Value.String() == "" {
		return true
	}
	return sampled.Add(1)%every == 1
}

var word = regexp.MustCompile(`[A-Za-z0-9._:/\[\]-]+`)

// Shape is a generated file's layout with every value-like word replaced
// by "w": which lines there are, and where their punctuation, quotes,
// braces, comments and separators stand. A file rendered from validated
// values has the same shape as one rendered from plain baseline values of
// the same kinds; a value that carried a newline, a brace, a quote, a '#'
// or a '%' into the file changes it.
func Shape(text string) string { return word.ReplaceAllString(text, "w") }
