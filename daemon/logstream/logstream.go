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

// Message is one WebSocket message: a log line, the final done message, or
// a state-change event ({event: topic}: fetch that resource again).
type Message struct {
	Event string     `json:"event,omitempty"`
	Time  *time.Time `json:"time,omitempty"`
	Level string     `json:"level,omitempty"`
	Line  string     `json:"line,omitempty"`
	Done  bool       `json:"done,omitempty"`
	OK    *bool      `json:"ok,omitempty"`
	Op    string     `json:"op,omitempty"`
	// Edge is the edge the operation runs on, for one that runs on
	// another edge of the cluster ("" for this edge's own).
	Edge string `json:"edge,omitempty"`
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
	// OnDone, when set before the first Begin, hears how each operation
	// ended: ok, and its last error line on failure (else its last line).
	OnDone func(op string, ok bool, message string)
	// outcomes counts finished operations by name and result (metrics).
	outcomes map[Outcome]int64
	// Relay, when set before the first Begin, hears every line and done
	// message of this edge's operations, to pass on to the other edges.
	// It must not block.
	Relay func(Message)
	// remote is the latest operation another edge reported (Deliver), for
	// watchers that connect while it runs.
	remote []Message
}

// Deliver passes a message of an operation running on another edge to
// every watcher here, and keeps that operation's lines for watchers that
// connect later.
func (h *Hub) Deliver(m Message) {
	if m.Edge == "" || m.Event != "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.remote); n > 0 {
		last := h.remote[n-1]
		if last.Done || last.Edge != m.Edge || last.Op != m.Op {
			h.remote = nil
		}
	}
	if len(h.remote) < maxBacklog || m.Done {
		h.remote = append(h.remote, m)
	}
	h.broadcast(m)
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

// TopicStatus is announced when an operation begins or ends.
const TopicStatus = "status"

// Notify tells every watcher that topic changed. It never blocks: a
// watcher too slow to take it is cut off like for log lines.
func (h *Hub) Notify(topic string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.broadcast(Message{Event: topic})
}

// broadcast sends m to every watcher; h.mu is held.
func (h *Hub) broadcast(m Message) {
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

// NewHub returns a Hub; now defaults to time.Now.
func NewHub(now func() time.Time) *Hub { return NewHubWith(now, Hooks{}) }

// Hooks are what a Hub tells others: OnDone how each operation ended,
// Relay every message of an operation running here.
type Hooks struct {
	OnDone func(op string, ok bool, message string)
	Relay  func(Message)
}

// NewHubWith is NewHub with its hooks.
func NewHubWith(now func() time.Time, h Hooks) *Hub {
	if now == nil {
		now = time.Now
	}
	return &Hub{now: now, subs: map[chan Message]struct{}{}, OnDone: h.OnDone, Relay: h.Relay}
}

// Op is one running operation. It satisfies the Progress interfaces of the
// domain packages (Line and Done).
type Op struct {
	hub        *Hub
	name       string
	backlog    []Message
	done       bool
	lastLine   string
	firstError string
}

// Begin starts an operation named name, or fails with ErrBusy.
func (h *Hub) Begin(name string) (*Op, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.current != nil && !h.current.done {
		return nil, ErrBusy
	}
	h.current = &Op{hub: h, name: name}
	h.broadcast(Message{Event: TopicStatus})
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
	o.hub.mu.Lock()
	o.lastLine = text
	if level == "error" && o.firstError == "" {
		o.firstError = text
	}
	o.hub.mu.Unlock()
	o.publish(Message{Time: &t, Level: level, Line: text, Op: o.name})
}

// Done ends the operation; later calls are ignored.
func (o *Op) Done(ok bool) {
	o.hub.mu.Lock()
	if o.done {
		o.hub.mu.Unlock()
		return
	}
	msg, onDone := o.lastLine, o.hub.OnDone
	if !ok && o.firstError != "" {
		msg = o.firstError
	}
	o.hub.mu.Unlock()
	// The outcome is stored before watchers learn that the operation ended,
	// so a dashboard that reads the status on the done message finds it.
	if onDone != nil {
		onDone(o.name, ok, msg)
	}
	o.publish(Message{Done: true, OK: &ok, Op: o.name})
	o.hub.mu.Lock()
	o.done = true
	if o.hub.outcomes == nil {
		o.hub.outcomes = map[Outcome]int64{}
	}
	o.hub.outcomes[Outcome{o.name, ok}]++
	o.hub.mu.Unlock()
	o.hub.Notify(TopicStatus)
}

func (o *Op) publish(m Message) {
	h := o.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if o.done {
		return
	}
	if h.Relay != nil {
		h.Relay(m)
	}
	if len(o.backlog) < maxBacklog || m.Done {
		o.backlog = append(o.backlog, m)
	}
	if h.current != o {
		return
	}
	h.broadcast(m)
}

// Subscribe returns the latest operation's messages so far and a channel of
// the ones to come. The channel is closed when cancel is called or the
// watcher falls too far behind.
func (h *Hub) Subscribe() (backlog []Message, ch <-chan Message, cancel func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := make(chan Message, subscriberBuffer)
	h.subs[c] = struct{}{}
	if len(h.remote) > 0 && (h.current == nil || h.current.done) {
		backlog = append(backlog, h.remote...)
	}
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
