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
