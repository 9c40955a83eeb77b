package logstream

import (
	"testing"
	"time"
)

func TestBusyBacklogAndLive(t *testing.T) {
	h := NewHub(nil)
	op, err := h.Begin("install")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Begin("firewall"); err != ErrBusy {
		t.Fatalf("second Begin: %v", err)
	}
	op.Line("info", "one")
	backlog, ch, cancel := h.Subscribe()
	defer cancel()
	if len(backlog) != 1 || backlog[0].Line != "one" {
		t.Fatalf("backlog %+v", backlog)
	}
	op.Line("warn", "two")
	op.Done(true)
	op.Done(false) // ignored
	m := <-ch
	if m.Line != "two" || m.Level != "warn" || m.Time == nil {
		t.Fatalf("live %+v", m)
	}
	m = <-ch
	if !m.Done || m.OK == nil || !*m.OK {
		t.Fatalf("done %+v", m)
	}
	select {
	case m := <-ch:
		t.Fatalf("message after done: %+v", m)
	case <-time.After(20 * time.Millisecond):
	}
	if _, err := h.Begin("again"); err != nil {
		t.Fatalf("Begin after Done: %v", err)
	}
}

func TestSlowSubscriberCutOff(t *testing.T) {
	h := NewHub(nil)
	op, _ := h.Begin("x")
	_, ch, cancel := h.Subscribe()
	defer cancel()
	for i := 0; i < subscriberBuffer+10; i++ {
		op.Line("info", "l")
	}
	n := 0
	for range ch {
		n++
	}
	if n != subscriberBuffer {
		t.Fatalf("got %d before the cut, want %d", n, subscriberBuffer)
	}
}
