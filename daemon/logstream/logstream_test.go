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
	if m = <-ch; m.Event != TopicStatus {
		t.Fatalf("after done: %+v, want the status event", m)
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

// TestEventsAndOutcome: watchers hear state-change events between
// operations, an operation's start and end are announced, and OnDone gets
// the first error line of a failure (its cause) or the last line of a
// success.
func TestEventsAndOutcome(t *testing.T) {
	h := NewHub(nil)
	type outcome struct {
		op  string
		ok  bool
		msg string
	}
	var got []outcome
	h.OnDone = func(op string, ok bool, msg string) { got = append(got, outcome{op, ok, msg}) }
	_, ch, cancel := h.Subscribe()
	defer cancel()
	h.Notify("machines")
	if m := <-ch; m.Event != "machines" || m.Line != "" || m.Done {
		t.Fatalf("event = %+v", m)
	}
	op, _ := h.Begin("install")
	if m := <-ch; m.Event != TopicStatus {
		t.Fatalf("begin announced as %+v", m)
	}
	op.Line("info", "starting caddy.service")
	op.Line("error", "starting caddy.service: systemd is not available")
	op.Line("error", "installation failed; the previous configuration is unchanged")
	op.Done(false)
	op2, _ := h.Begin("firewall")
	op2.Line("info", "table inet tunnelsvc loaded")
	op2.Done(true)
	want := []outcome{{"install", false, "starting caddy.service: systemd is not available"}, {"firewall", true, "table inet tunnelsvc loaded"}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("outcomes = %+v, want %+v", got, want)
	}
}
