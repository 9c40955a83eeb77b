package store

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

// OnChange sets the function told, after each committed write, which topic
// changed. It must not block; nil turns announcements off.
func (s *Store) OnChange(fn func(topic string)) {
	s.notify.Store(&notifier{fn: fn})
}

func (s *Store) changed(topics ...string) {
	n := s.notify.Load()
	if n == nil || n.fn == nil {
		return
	}
	for _, t := range topics {
		n.fn(t)
	}
}
