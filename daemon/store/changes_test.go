package store

import (
	"context"
	"testing"
	"time"
)

// TestChangesSeesEveryWriter: the number moves after a commit by another
// handle on the same file (as the admin commands are, from their own
// process) and after the store's own, and stays put while nothing is written.
func TestChangesSeesEveryWriter(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetSession(ctx, "none"); err != ErrNotFound {
		t.Fatal(err)
	}
	a := s.Changes()
	if _, err := s.GetSession(ctx, "none"); err != ErrNotFound {
		t.Fatal(err)
	}
	if b := s.Changes(); b != a {
		t.Fatalf("reads moved the number: %d -> %d", a, b)
	}

	other, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.CreateSession(ctx, Session{TokenHash: "h", CreatedAt: time.Unix(1, 0), ExpiresAt: time.Unix(2, 0)}); err != nil {
		t.Fatal(err)
	}
	b := s.Changes()
	if b == a {
		t.Fatal("a commit through another handle did not move the number")
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	s.Changes()
	c := s.Changes()
	if err := s.DeleteAllSessions(ctx); err != nil {
		t.Fatal(err)
	}
	if d := s.Changes(); d == c {
		t.Fatal("the store's own commit did not move the number")
	}
}

// TestSettingsReadAfterEveryWrite: settings are remembered between reads,
// yet a setting written, added or deleted through another handle on the
// same file (as the admin commands do from their own process) or through
// the store itself is read back at once, absent ones included.
func TestSettingsReadAfterEveryWrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, other := openAt(t, dir), openAt(t, dir)
	get := func(key string) string {
		t.Helper()
		v, err := s.GetSetting(ctx, key)
		if err == ErrNotFound {
			return "<none>"
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	want := func(key, v string) {
		t.Helper()
		for i := 0; i < 2; i++ { // the first read fills the cache, the second uses it
			if got := get(key); got != v {
				t.Fatalf("%s = %q, want %q", key, got, v)
			}
		}
	}
	want("domain", "<none>")
	if err := other.SetSetting(ctx, "domain", "a.example"); err != nil {
		t.Fatal(err)
	}
	want("domain", "a.example")
	if err := other.SetSetting(ctx, "domain", "b.example"); err != nil {
		t.Fatal(err)
	}
	want("domain", "b.example")
	if err := s.SetSetting(ctx, "domain", "c.example"); err != nil {
		t.Fatal(err)
	}
	want("domain", "c.example")
	if ok, err := other.SetSettingIfAbsent(ctx, "bind_ip", "192.0.2.1"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	want("bind_ip", "192.0.2.1")
	if err := other.DeleteSetting(ctx, "domain"); err != nil {
		t.Fatal(err)
	}
	want("domain", "<none>")
	want("bind_ip", "192.0.2.1")
	if _, err := other.DB().ExecContext(ctx, "UPDATE settings SET value = 'x' WHERE key = 'bind_ip'"); err != nil {
		t.Fatal(err)
	}
	want("bind_ip", "x")
}

// TestMachineListAfterEveryWrite: the machine list is remembered between
// reads, yet a machine registered, renamed, seen, given a config outcome
// or deleted, through the store or another handle, shows in the very next
// list; and a caller changing its copy changes nobody else's.
func TestMachineListAfterEveryWrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, other := openAt(t, dir), openAt(t, dir)
	list := func() []Machine {
		t.Helper()
		ms, err := s.ListMachines(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	want := func(what string, ok func([]Machine) bool) {
		t.Helper()
		for i := 0; i < 2; i++ { // the first read fills the cache, the second uses it
			if ms := list(); !ok(ms) {
				t.Fatalf("%s: %+v", what, ms)
			}
		}
	}
	want("empty", func(ms []Machine) bool { return len(ms) == 0 })
	reg := func(st *Store, name string) Machine {
		m, err := st.RegisterMachine(ctx, NewMachine{Name: name, Username: "pi", SecretHash: name + "s", AgentTokenHash: name + "a",
			Seal: func(int64) (string, error) { return "sealed", nil }, Now: time.Now(), Ports: PortRange{Lo: 30000, Hi: 30100}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a := reg(s, "a")
	want("registered here", func(ms []Machine) bool { return len(ms) == 1 && ms[0].Name == "a" })
	b := reg(other, "b")
	want("registered elsewhere", func(ms []Machine) bool { return len(ms) == 2 && ms[1].Name == "b" })
	if err := other.RenameMachine(ctx, a.ID, "a2"); err != nil {
		t.Fatal(err)
	}
	want("renamed", func(ms []Machine) bool { return ms[0].Name == "a2" })
	seen := time.UnixMilli(time.Now().UnixMilli()).UTC()
	if err := s.SetMachineStatus(ctx, b.ID, "online", seen); err != nil {
		t.Fatal(err)
	}
	want("online", func(ms []Machine) bool { return ms[1].Status == "online" && ms[1].LastSeen.Equal(seen) })
	if err := other.TouchMachine(ctx, b.ID, seen.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	want("seen", func(ms []Machine) bool { return ms[1].LastSeen.Equal(seen.Add(time.Second)) })
	if err := s.SetConfigPush(ctx, a.ID, ConfigPush{OK: false, Message: "refused", At: seen}); err != nil {
		t.Fatal(err)
	}
	want("config outcome", func(ms []Machine) bool { return ms[0].ConfigPush != nil && ms[0].ConfigPush.Message == "refused" })

	ms := list()
	ms[0].Name, ms[0].ConfigPush.Message = "changed by a caller", "changed by a caller"
	want("a caller's change", func(ms []Machine) bool { return ms[0].Name == "a2" && ms[0].ConfigPush.Message == "refused" })

	if err := other.DeleteMachine(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	want("deleted", func(ms []Machine) bool { return len(ms) == 1 && ms[0].Name == "b" })
}
