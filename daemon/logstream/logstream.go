// Package logstream carries the log lines of slow background operations
// (install, ban-tool setup, firewall takeover) to every dashboard watching
// the log WebSocket. One operation runs at a time; a watcher that connects
// late first receives what the latest operation has said so far.
package logstream

import (
	"errors"
	"sync"
	"time"
)

// ErrBusy is returned by Begin while another operation runs.
var ErrBusy = errors.New("another operation is running")

// Message is one WebSocket message: a log line, or the final done message.
type Message struct {
	Time  *time.Time `json:"time,omitempty"`
	Level string     `json:"level,omitempty"`
	Line  string     `json:"line,omitempty"`
	Done  bool       `json:"done,omitempty"`
	OK    *bool      `json:"ok,omitempty"`
	Op    string     `json:"op,omitempty"`
}

// subscriberBuffer is how far a watcher may fall behind before it is cut
// off (it can reconnect and get the backlog again).
const subscriberBuffer = 256

// maxBacklog bounds the lines kept for late watchers.
const maxBacklog = 2000

// Hub is the single place operations report to.
type Hub struct {
	mu      sync.Mutex
	now     func() time.Time
	current *Op
	subs    map[chan Message]struct{}
	// outcomes counts finished operations by name and result (metrics).
	outcomes map[Outcome]int64
}

// Outcome is a finished operation's name and whether it succeeded.
type Outcome struct {
	Name string
	OK   bool
}

// Outcomes returns how many operations finished, by name and result, since
// the daemon started.
func (h *Hub) Outcomes() map[Outcome]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[Outcome]int64, len(h.outcomes))
	for k, v := range h.outcomes {
		out[k] = v
	}
	return out
}

// NewHub returns a Hub; now defaults to time.Now.
func NewHub(now func() time.Time) *Hub {
	if now == nil {
		now = time.Now
	}
	return &Hub{now: now, subs: map[chan Message]struct{}{}}
}

// Op is one running operation. It satisfies the Progress interfaces of the
// domain packages (Line and Done).
type Op struct {
	hub     *Hub
	name    string
	backlog []Message
	done    bool
}

// Begin starts an operation named name, or fails with ErrBusy.
func (h *Hub) Begin(name string) (*Op, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.current != nil && !h.current.done {
		return nil, ErrBusy
	}
	h.current = &Op{hub: h, name: name}
	return h.current, nil
}

// Running reports the name of the running operation, if any.
func (h *Hub) Running() (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.current != nil && !h.current.done {
		return h.current.name, true
	}
	return "", false
}

// Line reports one log line (level: info, warn, error).
func (o *Op) Line(level, text string) {
	t := o.hub.now().UTC()
	o.publish(Message{Time: &t, Level: level, Line: text, Op: o.name})
}

// Done ends the operation; later calls are ignored.
func (o *Op) Done(ok bool) {
	o.hub.mu.Lock()
	if o.done {
		o.hub.mu.Unlock()
		return
	}
	o.hub.mu.Unlock()
	o.publish(Message{Done: true, OK: &ok, Op: o.name})
	o.hub.mu.Lock()
	o.done = true
	if o.hub.outcomes == nil {
		o.hub.outcomes = map[Outcome]int64{}
	}
	o.hub.outcomes[Outcome{o.name, ok}]++
	o.hub.mu.Unlock()
}

func (o *Op) publish(m Message) {
	h := o.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if o.done {
		return
	}
	if len(o.backlog) < maxBacklog || m.Done {
		o.backlog = append(o.backlog, m)
	}
	if h.current != o {
		return
	}
	for ch := range h.subs {
		select {
		case ch <- m:
		default:
			// Too slow: cut it off rather than block the operation.
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// Subscribe returns the latest operation's messages so far and a channel of
// the ones to come. The channel is closed when cancel is called or the
// watcher falls too far behind.
func (h *Hub) Subscribe() (backlog []Message, ch <-chan Message, cancel func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := make(chan Message, subscriberBuffer)
	h.subs[c] = struct{}{}
	if h.current != nil {
		backlog = append(backlog, h.current.backlog...)
	}
	return backlog, c, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[c]; ok {
			delete(h.subs, c)
			close(c)
		}
	}
}
