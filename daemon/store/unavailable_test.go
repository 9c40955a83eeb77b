package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
)

type sqlStateErr string

func (e sqlStateErr) Error() string    { return "server said " + string(e) }
func (e sqlStateErr) SQLState() string { return string(e) }

func TestUnavailable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("UNIQUE constraint failed: tunnels.name"), false},
		{fmt.Errorf("list machines: %w", sqlStateErr("23505")), false},
		{fmt.Errorf("list machines: %w", sqlStateErr("08006")), true},
		{sqlStateErr("57P01"), true},
		{sqlStateErr("57P03"), true},
		{sqlStateErr("40001"), false},
		{fmt.Errorf("query: %w", driver.ErrBadConn), true},
		{&net.OpError{Op: "dial", Net: "unix", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		// A slow query is not a lost database (an i/o timeout of the
		// connection is a net.OpError, above).
		{fmt.Errorf("query: %w", context.DeadlineExceeded), false},
		{context.Canceled, false},
	} {
		if got := Unavailable(c.err); got != c.want {
			t.Errorf("Unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// While the database cannot be reached, a Memo answers each key's last
// value read, however many commits ago; another failure (not found)
// forgets it, and a successful load replaces it.
func TestMemoServesTheLastValueWhileTheDatabaseIsGone(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		var m Memo[string, string]
		gone := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		value, fail := "v1", error(nil)
		load := func() (string, error) { return value, fail }
		if v, err := m.Get(s, "k", load); err != nil || v != "v1" {
			t.Fatalf("first load: %q %v", v, err)
		}
		// Commits move the count: the memo must load again, and the load
		// fails because the database is gone.
		for range 3 {
			if err := s.SetSetting(ctx, "memo-test", value); err != nil {
				t.Fatal(err)
			}
		}
		value, fail = "", gone
		if v, err := m.Get(s, "k", load); err != nil || v != "v1" {
			t.Fatalf("database gone: %q %v, want the last value v1", v, err)
		}
		// A key never read has nothing to stand in.
		if _, err := m.Get(s, "other", load); !Unavailable(err) {
			t.Fatalf("a key never read: %v", err)
		}
		// Back: the new value replaces it.
		value, fail = "v2", nil
		s.SetSetting(ctx, "memo-test", "x")
		if v, err := m.Get(s, "k", load); err != nil || v != "v2" {
			t.Fatalf("back: %q %v", v, err)
		}
		// Not found forgets it: a later outage does not bring it back.
		s.SetSetting(ctx, "memo-test", "y")
		value, fail = "", ErrNotFound
		if _, err := m.Get(s, "k", load); err != ErrNotFound {
			t.Fatalf("not found: %v", err)
		}
		s.SetSetting(ctx, "memo-test", "z")
		value, fail = "", gone
		if v, err := m.Get(s, "k", load); !Unavailable(err) {
			t.Fatalf("gone after not found: %q %v, want the failure", v, err)
		}
	})
}
