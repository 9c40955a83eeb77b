package machines

import (
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// StatusOf: one word and why, in the order an operator can act on.
func TestStatusOf(t *testing.T) {
	seen := time.Date(2026, 12, 6, 16, 0, 0, 0, time.UTC)
	failed := &store.ConfigPush{OK: false, Message: "the machine's agent does not answer"}
	for _, c := range []struct {
		name   string
		m      store.Machine
		tunnel string
		want   Status
	}{
		{"online", store.Machine{Status: "online", LastSeen: seen}, "", Status{"online", ""}},
		{"online, config not delivered", store.Machine{Status: "online", LastSeen: seen, ConfigPush: failed}, "",
			Status{"online", "config not delivered: the machine's agent does not answer"}},
		{"online, old agent", store.Machine{Status: "online", LastSeen: seen, AgentOutdated: true}, "", Status{"online", OutdatedAgentHint}},
		{"recorded online, tunnel server gone", store.Machine{Status: "online", LastSeen: seen, ConfigPush: failed}, "nothing has answered on its port since 16:00:05 UTC",
			Status{"offline", "the tunnel server is not running: nothing has answered on its port since 16:00:05 UTC"}},
		{"offline", store.Machine{Status: "offline", LastSeen: seen}, "", Status{"offline", "disconnected"}},
		{"offline, tunnel server gone", store.Machine{Status: "offline", LastSeen: seen}, "x", Status{"offline", "the tunnel server is not running: x"}},
		{"pending", store.Machine{Status: "pending"}, "x", Status{"pending", "never connected"}},
		{"nothing recorded", store.Machine{}, "", Status{"pending", "never connected"}},
	} {
		if got := StatusOf(c.m, c.tunnel); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
