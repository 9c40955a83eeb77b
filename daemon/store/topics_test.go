package store

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestTunnelStatusIsAnnouncedApart: a tunnel's proxy coming up or going
// down is announced as TopicTunnelStatus, not TopicTunnels: what listens
// to TopicTunnels renders configs (every machine's, the Caddyfile, the
// gate), and a fleet's clients restarting must not make each render
// again once per tunnel. A change to the tunnel itself is TopicTunnels.
func TestTunnelStatusIsAnnouncedApart(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		var mu sync.Mutex
		var heard []string
		s.OnChange(func(topic string) { mu.Lock(); heard = append(heard, topic); mu.Unlock() })
		took := func() []string {
			mu.Lock()
			defer mu.Unlock()
			out := heard
			heard = nil
			return out
		}
		m, err := s.RegisterMachine(ctx, NewMachine{Name: "nas", Username: "pi", SecretHash: "s1", AgentTokenHash: "a1",
			Seal: func(int64) (string, error) { return "sealed", nil }, Now: time.Now(), Ports: PortRange{Lo: 30000, Hi: 30009}})
		if err != nil {
			t.Fatal(err)
		}
		tn, err := s.InsertTunnel(ctx, Tunnel{MachineID: m.ID, Name: "web", Kind: "http", LocalPort: 80, Subdomain: "web"}, PortRange{Lo: 30000, Hi: 30009}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if got := took(); !slices.Contains(got, TopicTunnels) {
			t.Fatalf("a new tunnel announced %v", got)
		}
		if err := s.SetTunnelStatus(ctx, tn.ID, "online"); err != nil {
			t.Fatal(err)
		}
		if got := took(); !slices.Equal(got, []string{TopicTunnelStatus}) {
			t.Fatalf("a tunnel's status announced %v, want only %s", got, TopicTunnelStatus)
		}
		if !slices.Contains(Topics, TopicTunnelStatus) {
			t.Fatal("the other edges would not hear it: not in Topics")
		}
	})
}
