package store

import (
	"context"
	"testing"
	"time"
)

func TestMigrateEmptyCloseReopen(t *testing.T) { eachEmptyEngine(t, testMigrateEmptyCloseReopen) }

func testMigrateEmptyCloseReopen(t *testing.T, db testDB) {
	ctx := context.Background()
	s, err := OpenDatabase(ctx, db.dir, db.url)
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := loadMigrations()
	v, err := s.SchemaVersion(ctx)
	if err != nil || v != ms[len(ms)-1].version {
		t.Fatalf("schema version = %d, %v; want %d", v, err, ms[len(ms)-1].version)
	}
	if err := s.SetSetting(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = OpenDatabase(ctx, db.dir, db.url)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if s.Engine() != db.engine {
		t.Fatalf("engine %q, want %q", s.Engine(), db.engine)
	}
	defer s.Close()
	got, err := s.GetSetting(ctx, "k")
	if err != nil || got != "v1" {
		t.Fatalf("setting after reopen = %q, %v", got, err)
	}
	var n int
	if err := s.queryRow(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&n); err != nil || n != len(ms) {
		t.Fatalf("applied migrations = %d, %v; want %d (each exactly once)", n, err, len(ms))
	}
}

func TestConnectionOptions(t *testing.T) {
	s, err := Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mode string
	var fk, busy int
	s.DB().QueryRow("PRAGMA journal_mode").Scan(&mode)
	s.DB().QueryRow("PRAGMA foreign_keys").Scan(&fk)
	s.DB().QueryRow("PRAGMA busy_timeout").Scan(&busy)
	if mode != "wal" || fk != 1 || busy != 5000 {
		t.Fatalf("journal_mode=%q foreign_keys=%d busy_timeout=%d", mode, fk, busy)
	}
}

func TestSettingIfAbsentAndSessions(t *testing.T) { eachStore(t, testSettingIfAbsentAndSessions) }

func testSettingIfAbsentAndSessions(t *testing.T, s *Store) {
	ctx := context.Background()
	if ok, err := s.SetSettingIfAbsent(ctx, "pw", "a"); !ok || err != nil {
		t.Fatalf("first insert: %v %v", ok, err)
	}
	if ok, err := s.SetSettingIfAbsent(ctx, "pw", "b"); ok || err != nil {
		t.Fatalf("second insert: %v %v", ok, err)
	}
	now := time.Unix(1_700_000_000, 0)
	if err := s.CreateSession(ctx, Session{TokenHash: "h", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSession(ctx, "h"); err != nil {
		t.Fatal(err)
	}
	s.DeleteExpiredSessions(ctx, now.Add(2*time.Hour))
	if _, err := s.GetSession(ctx, "h"); err != ErrNotFound {
		t.Fatalf("expired session still there: %v", err)
	}
}

// openAt opens the store in dir, closed when the test ends. Two calls on the
// same dir are two handles on one file, as the daemon and an admin command
// in another process are.
func openAt(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSessionAuthenticatedAt: a session's last authentication is its
// creation until a step-up moves it; a row from before the column (0)
// reads as its creation too.
func TestSessionAuthenticatedAt(t *testing.T) { eachStore(t, testSessionAuthenticatedAt) }

func testSessionAuthenticatedAt(t *testing.T, s *Store) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	if err := s.CreateSession(ctx, Session{TokenHash: "h", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSession(ctx, "h"); !got.AuthenticatedAt.Equal(now) {
		t.Fatalf("new session authenticated at %v, want %v", got.AuthenticatedAt, now)
	}
	if err := s.SetSessionAuthenticated(ctx, "h", now.Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSession(ctx, "h"); !got.AuthenticatedAt.Equal(now.Add(5 * time.Minute)) {
		t.Fatalf("after a step-up: %v", got.AuthenticatedAt)
	}
	if _, err := s.exec(ctx, "UPDATE sessions SET authenticated_at = 0"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSession(ctx, "h"); !got.AuthenticatedAt.Equal(now) {
		t.Fatalf("a row from before the column: %v, want its creation", got.AuthenticatedAt)
	}
	if err := s.SetSessionAuthenticated(ctx, "gone", now); err != ErrNotFound {
		t.Fatalf("step-up of an ended session: %v", err)
	}
}
