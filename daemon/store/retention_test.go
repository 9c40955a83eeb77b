package store

import (
	"context"
	"strings"
	"testing"
	"time"
)

func count(t *testing.T, s *Store, table string) int {
	t.Helper()
	var n int
	if err := s.queryRow(context.Background(), "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPrune: rows older than the cutoff go, and each table keeps at most
// maxRows, the newest.
func TestPrune(t *testing.T) { eachStore(t, testPrune) }

func testPrune(t *testing.T, s *Store) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	old := now.Add(-91 * 24 * time.Hour)
	const rows = 100_005
	// In statements of a thousand rows: one per row took minutes on
	// PostgreSQL.
	err := s.Tx(ctx, func(tx *Tx) error {
		const batch = 1000
		for i := 0; i < rows; i += batch {
			n := min(batch, rows-i)
			args := make([]any, n)
			for k := range n {
				args[k] = now.Add(-time.Duration(rows-i-k) * time.Second).UnixMilli()
			}
			q := "INSERT INTO audit_log(created_at, kind) VALUES (?, 'LOGIN_FAILED')" + strings.Repeat(", (?, 'LOGIN_FAILED')", n-1)
			if _, err := tx.exec(ctx, q, args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{old, now} {
		if err := s.InsertAudit(ctx, AuditEntry{CreatedAt: at, Kind: "SETUP"}); err != nil {
			t.Fatal(err)
		}
		if err := s.InsertEvent(ctx, Event{CreatedAt: at, Source: "machine", Kind: "machine_registered"}); err != nil {
			t.Fatal(err)
		}
		if err := s.InsertStaleTokenAttempt(ctx, StaleTokenAttempt{CreatedAt: at, ClientAddr: "192.0.2.1", Reason: "unknown token"}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.Prune(ctx, now.Add(-90*24*time.Hour), 100_000)
	if err != nil {
		t.Fatal(err)
	}
	if n["audit_log"] != 7 || n["activity_events"] != 1 || n["stale_token_attempts"] != 1 {
		t.Fatalf("pruned %v; want audit_log 7 (1 old, 6 over the cap), 1 and 1", n)
	}
	if c := count(t, s, "audit_log"); c != 100_000 {
		t.Fatalf("audit_log keeps %d rows, want 100000", c)
	}
	if c := count(t, s, "activity_events") + count(t, s, "stale_token_attempts"); c != 2 {
		t.Fatalf("%d recent activity and stale rows left, want 2", c)
	}
	// The newest audit row survived the cap.
	if e, err := s.ListAudit(ctx, 1); err != nil || e[0].Kind != "SETUP" {
		t.Fatalf("newest row: %v %v", e, err)
	}
}
