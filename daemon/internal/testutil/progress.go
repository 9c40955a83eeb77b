package testutil

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// Progress records a background operation's lines (the Progress interface
// of the domain packages) for assertions.
type Progress struct {
	mu    sync.Mutex
	lines []string
	done  chan bool
}

// NewProgress returns an empty recorder.
func NewProgress() *Progress { return &Progress{done: make(chan bool, 1)} }

// Line records "level: text".
func (p *Progress) Line(level, text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines = append(p.lines, level+": "+text)
}

// Done records the outcome.
func (p *Progress) Done(ok bool) { p.done <- ok }

// Text is every line so far, one per line.
func (p *Progress) Text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// Wait returns the outcome, failing the test when the operation has not
// finished within 30 s.
func (p *Progress) Wait(t testing.TB) bool {
	t.Helper()
	select {
	case ok := <-p.done:
		return ok
	case <-time.After(30 * time.Second):
		t.Fatalf("operation did not finish:\n%s", p.Text())
		return false
	}
}
