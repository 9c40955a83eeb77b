package store

import (
	"context"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// TestChangesSeesEveryWriter: the number moves after a commit by another
// handle on the same file (as the admin commands are, from their own
// process) and after the store's own, and stays put while nothing is written.
func TestChangesSeesEveryWriter(t *testing.T) { eachEngine(t, testChangesSeesEveryWriter) }

func testChangesSeesEveryWriter(t *testing.T, db testDB) {
	ctx := context.Background()
	s := db.open()
	if _, err := s.GetSession(ctx, "none"); err != ErrNotFound {
		t.Fatal(err)
	}
	a := settled(t, s)
	if _, err := s.GetSession(ctx, "none"); err != ErrNotFound {
		t.Fatal(err)
	}
	if b := s.Changes(); b != a {
		t.Fatalf("reads moved the number: %d -> %d", a, b)
	}

	other, err := OpenDatabase(ctx, db.dir, db.url)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.CreateSession(ctx, Session{TokenHash: "h", CreatedAt: time.Unix(1, 0), ExpiresAt: time.Unix(2, 0)}); err != nil {
		t.Fatal(err)
	}
	if !db.moves(s, a) {
		t.Fatal("a commit through another handle did not move the number")
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	c := settled(t, s)
	if _, err := s.DeleteAllSessions(ctx, time.Now()); err != nil {
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
func TestSettingsReadAfterEveryWrite(t *testing.T) { eachEngine(t, testSettingsReadAfterEveryWrite) }

func testSettingsReadAfterEveryWrite(t *testing.T, db testDB) {
	ctx := context.Background()
	s, other := db.open(), db.open()
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
		db.eventually(t, func() bool { return get(key) == v })
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
	if got := get("domain"); got != "c.example" { // its own write: at once
		t.Fatalf("domain = %q right after the store's own write", got)
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
	if _, err := other.exec(ctx, "UPDATE settings SET value = 'x' WHERE key = 'bind_ip'"); err != nil {
		t.Fatal(err)
	}
	want("bind_ip", "x")
}

// TestMachineListAfterEveryWrite: the machine list is remembered between
// reads, yet a machine registered, renamed, seen, given a config outcome
// or deleted, through the store or another handle, shows in the very next
// list; and a caller changing its copy changes nobody else's.
func TestMachineListAfterEveryWrite(t *testing.T) { eachEngine(t, testMachineListAfterEveryWrite) }

func testMachineListAfterEveryWrite(t *testing.T, db testDB) {
	ctx := context.Background()
	s, other := db.open(), db.open()
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
		db.eventually(t, func() bool { return ok(list()) })
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
	if err := other.TouchMachines(ctx, map[int64]time.Time{b.ID: seen.Add(time.Second)}, 0); err != nil {
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

// A write by another process reaches a PostgreSQL store's caches through
// its LISTEN connection: within a second. SQLite's inotify sees it before
// the write returns.
const otherWriterDelay = time.Second

func (d testDB) delay() time.Duration {
	if d.engine == "postgres" {
		return otherWriterDelay
	}
	return 0
}

// eventually waits until ok holds, at most the engine's delay.
func (d testDB) eventually(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d.delay())
	for !ok() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// moves reports whether s.Changes() moves from a within the engine's delay.
func (d testDB) moves(s *Store, a uint64) bool {
	deadline := time.Now().Add(d.delay())
	for {
		if s.Changes() != a {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// settled waits until s.Changes() stays put (a PostgreSQL store counts
// every call as a change until its listener is connected) and returns it.
func settled(t *testing.T, s *Store) uint64 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	a := s.Changes()
	for {
		time.Sleep(20 * time.Millisecond)
		b := s.Changes()
		if a == b {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatal("Changes() keeps moving with nothing written")
		}
		a = b
	}
}

// TestListenLostHearsEverything: when the LISTEN connection is cut, what
// the other edges announced meanwhile is gone; once it listens again,
// every topic is heard, so each follower looks again at once instead of
// at its next periodic pass.
func TestListenLostHearsEverything(t *testing.T) {
	db := testDB{t: t, engine: "postgres", dir: t.TempDir(), url: testutil.PostgresURLFrom(t, "store_migrated", migrated)}
	s := db.open()
	heard := make(chan string, 100)
	s.OnRemoteChange(func(topic string) {
		select {
		case heard <- topic:
		default:
		}
	})
	listening := func() bool {
		s.changes.mu.Lock()
		defer s.changes.mu.Unlock()
		l, ok := s.changes.watch.(*pgListen)
		return ok && l.live.Load()
	}
	db.eventually(t, listening)
	select {
	case topic := <-heard:
		t.Fatalf("heard %q before anything was announced or lost", topic)
	default:
	}

	ctx := context.Background()
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query ILIKE 'listen %'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("cutting the LISTEN connection: %d cut, %v", n, err)
	}
	got := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(got) < len(Topics) {
		select {
		case topic := <-heard:
			got[topic] = true
		case <-deadline:
			t.Fatalf("after the LISTEN connection came back, heard only %v of %v", got, Topics)
		}
	}
}
