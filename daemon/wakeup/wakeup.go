// Package wakeup is a loop's "look again soon": a signal whose sender never
// blocks and of which at most one waits, however many were sent. A lost
// signal costs nothing the loop's own period does not mend.
package wakeup

import "sync"

// Signal is ready to use at its zero value; it must not be copied.
type Signal struct {
	once sync.Once
	ch   chan struct{}
}

func (s *Signal) c() chan struct{} {
	s.once.Do(func() { s.ch = make(chan struct{}, 1) })
	return s.ch
}

// Notify leaves a signal for the loop, unless one waits already; it never
// blocks.
func (s *Signal) Notify() {
	select {
	case s.c() <- struct{}{}:
	default:
	}
}

// C receives the waiting signal.
func (s *Signal) C() <-chan struct{} { return s.c() }
