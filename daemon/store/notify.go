package store

import (
	"context"
	"strings"
	"time"
)

// Topics a change is announced under; the dashboard fetches that resource
// again when it hears one.
const (
	TopicMachines = "machines"
	TopicTunnels  = "tunnels"
	TopicActivity = "activity"
	TopicTokens   = "tokens"
	TopicAudit    = "audit"
	// TopicSettings: a setting changed (domain, server host, bind address…).
	TopicSettings = "settings"
)

type notifier struct{ fn func(topic string) }

// topicsChannel is the NOTIFY channel each announced topic goes out on
// (as "<origin>/<topic>"), so that the other daemons of a cluster learn
// what changed, not only that something did.
const topicsChannel = "tunnelsvc_topics"

// OnRemoteChange sets the function told which topic changed when another
// process (another edge, an admin command) announced it: on PostgreSQL,
// within a moment of its commit; never on SQLite, where one daemon is
// the only writer that announces. It must not block.
func (s *Store) OnRemoteChange(fn func(topic string)) {
	s.remote.Store(&notifier{fn: fn})
	s.Changes() // starts the listener
}

// heard is a topic announcement from the listener: the other processes'
// go to OnRemoteChange, this one's own are ignored (it heard them at once).
func (s *Store) heard(payload string) {
	origin, topic, ok := strings.Cut(payload, "/")
	if !ok || origin == s.origin || topic == "" {
		return
	}
	if n := s.remote.Load(); n != nil && n.fn != nil {
		n.fn(topic)
	}
}

// announce sends this process's topics to the others, in order, one
// statement each, from one goroutine: a write never waits for it, and a
// full queue drops (the others still see that something changed, through
// Changes, and their periodic passes).
func (s *Store) announceLoop() {
	for {
		select {
		case <-s.quit:
			return
		case topic := <-s.outbox:
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s.db.ExecContext(ctx, "SELECT pg_notify($1, $2)", topicsChannel, s.origin+"/"+topic)
			cancel()
		}
	}
}

// OnChange sets the function told, after each committed write, which topic
// changed. It must not block; nil turns announcements off.
func (s *Store) OnChange(fn func(topic string)) {
	s.notify.Store(&notifier{fn: fn})
}

func (s *Store) changed(topics ...string) {
	if s.outbox != nil {
		for _, t := range topics {
			select {
			case s.outbox <- t:
			default:
			}
		}
	}
	n := s.notify.Load()
	if n == nil || n.fn == nil {
		return
	}
	for _, t := range topics {
		n.fn(t)
	}
}
