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
	// TopicTunnelStatus: a tunnel's (or a target's) proxy opened or
	// closed on an edge. The dashboard hears it as TopicTunnels; nothing
	// the daemon renders depends on it, so no renderer looks again (a
	// fleet whose clients all restart would otherwise re-render every
	// machine's config, the Caddyfile and the gate once per tunnel).
	TopicTunnelStatus = "tunnel_status"
	// TopicProbes: a tunnel's reachability was probed anew. Apart from
	// TopicTunnels, which makes the prober look again: a probe's own
	// result must not start another probe.
	TopicProbes   = "probes"
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

// Topics lists every topic announced.
var Topics = []string{TopicMachines, TopicTunnels, TopicTunnelStatus, TopicProbes, TopicActivity, TopicTokens, TopicAudit, TopicSettings, TopicEdges, TopicRollouts}

// missed follows a LISTEN connection that was lost and is back: the
// announcements made meanwhile are gone, so OnRemoteChange hears every
// topic, and each follower looks again now instead of at its next
// periodic pass.
func (s *Store) missed() {
	n := s.remote.Load()
	if n == nil || n.fn == nil {
		return
	}
	for _, t := range Topics {
		n.fn(t)
	}
}

// notice is one NOTIFY to send: its channel and payload (without origin).
type notice struct{ channel, payload string }

// logChannel carries the log messages of operations (logstream), as
// "<origin>/<JSON message>", so that a dashboard on any edge follows an
// operation running on another.
const logChannel = "tunnelsvc_log"

// maxLogPayload keeps a log message under NOTIFY's 8000-byte limit.
const maxLogPayload = 7000

// PublishLog sends one operation log message to the other processes (on
// PostgreSQL; nothing on SQLite). It never waits: when the queue is full
// the message is dropped, and the operation's outcome still reaches every
// edge through the database.
func (s *Store) PublishLog(msg string) {
	if s.outbox == nil || len(msg) > maxLogPayload {
		return
	}
	select {
	case s.outbox <- notice{logChannel, msg}:
	default:
	}
}

// OnRemoteLog sets the function told each log message another process
// published. It must not block.
func (s *Store) OnRemoteLog(fn func(msg string)) {
	s.remoteLog.Store(&notifier{fn: fn})
	s.Changes() // starts the listener
}

func (s *Store) heardLog(payload string) {
	origin, msg, ok := strings.Cut(payload, "/")
	if !ok || origin == s.origin {
		return
	}
	if n := s.remoteLog.Load(); n != nil && n.fn != nil {
		n.fn(msg)
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
		case n := <-s.outbox:
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s.db.ExecContext(ctx, "SELECT pg_notify($1, $2)", n.channel, s.origin+"/"+n.payload)
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
			case s.outbox <- notice{topicsChannel, t}:
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
