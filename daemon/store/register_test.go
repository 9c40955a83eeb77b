package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRegistrationRecordsItsConfig: a registration with Config records the
// config the machine installs as generation 1, applied, in its own
// transaction (Config sees the new machine's id and ports); when Config
// fails, nothing is left: no machine, no port, the token still unused.
func TestRegistrationRecordsItsConfig(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.Now()
		if _, err := s.InsertBootstrapToken(ctx, "th", "for nas", now, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		n := NewMachine{Name: "nas", Username: "pi", SecretHash: "s", AgentTokenHash: "a", TokenHash: "th", ConsumeToken: true,
			Seal: func(int64) (string, error) { return "sealed", nil }, Now: now, Ports: PortRange{Lo: 30000, Hi: 30009}}
		n.Config = func(m Machine) (string, string, error) { return "", "", errors.New("no CA") }
		if _, err := s.RegisterMachine(ctx, n); err == nil || err.Error() != "no CA" {
			t.Fatalf("a failing Config: %v, want its error", err)
		}
		if c := count(t, s, "machines"); c != 0 {
			t.Fatalf("%d machines after a failed registration", c)
		}
		if c := count(t, s, "ports"); c != 0 {
			t.Fatalf("%d ports held after a failed registration", c)
		}
		var seen Machine
		n.Config = func(m Machine) (string, string, error) {
			seen = m
			return "digest-1", "vps.example.com", nil
		}
		m, err := s.RegisterMachine(ctx, n)
		if err != nil {
			t.Fatalf("the token was spent by the failed registration: %v", err)
		}
		if seen.ID != m.ID || seen.TunnelPort == 0 || seen.TunnelPort != m.TunnelPort || seen.AgentPort != m.AgentPort {
			t.Fatalf("Config saw %+v, the machine is %+v", seen, m)
		}
		for _, c := range []ConfigState{m.Config, mustMachine(t, s, m.ID).Config} {
			if c.DesiredGen != 1 || c.AppliedGen != 1 || c.DesiredHash != "digest-1" || c.AppliedServer != "vps.example.com" || !c.PendingSince.IsZero() {
				t.Fatalf("config state %+v, want generation 1 applied, digest-1 on vps.example.com", c)
			}
		}
	})
}

func mustMachine(t *testing.T, s *Store, id int64) Machine {
	t.Helper()
	m, err := s.GetMachine(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSetSettingIfAbsentSeesTheWinner: when another writer got the key
// first, so lately that this process's caches have not heard of it (here:
// a row written past the store, which announces nothing on PostgreSQL),
// the GetSetting that follows a refused SetSettingIfAbsent reads the
// winner's value, not the absence it remembered.
func TestSetSettingIfAbsentSeesTheWinner(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		// Until its change watcher runs, a store counts every call as a
		// change and remembers nothing: wait for the count to hold still.
		deadline := time.Now().Add(10 * time.Second)
		for s.Changes() != s.Changes() {
			if time.Now().After(deadline) {
				t.Fatal("the change count never held still")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := s.GetSetting(ctx, "tunnel_ca"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("before: %v, want ErrNotFound", err)
		}
		if _, err := s.db.ExecContext(ctx, "INSERT INTO settings(key, value) VALUES ('tunnel_ca', 'winner')"); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.SetSettingIfAbsent(ctx, "tunnel_ca", "loser"); ok || err != nil {
			t.Fatalf("SetSettingIfAbsent over the winner: %v, %v; want false", ok, err)
		}
		if v, err := s.GetSetting(ctx, "tunnel_ca"); err != nil || v != "winner" {
			t.Fatalf("after: %q, %v; want the winner's value", v, err)
		}
	})
}
