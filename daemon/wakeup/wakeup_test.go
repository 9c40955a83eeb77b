package wakeup

import "testing"

// Many signals before the loop looks leave one; none leaves none.
func TestSignalKeepsOne(t *testing.T) {
	var s Signal
	select {
	case <-s.C():
		t.Fatal("a signal before any was sent")
	default:
	}
	for range 5 {
		s.Notify()
	}
	<-s.C()
	select {
	case <-s.C():
		t.Fatal("five signals left more than one")
	default:
	}
}
