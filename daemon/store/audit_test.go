package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAggregatedAudit: events of one kind from one address in one minute
// are one row carrying their count; the next minute starts another row.
func TestAggregatedAudit(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		minute := time.Unix(1_800_000_000, 0).Truncate(time.Minute)
		add := func(at time.Time, addr string) bool {
			t.Helper()
			created, err := s.AddAggregatedAudit(ctx, AuditEntry{CreatedAt: at, Kind: "LOGIN_RATE_LIMITED", ClientAddr: addr, Detail: at.String()})
			if err != nil {
				t.Fatal(err)
			}
			return created
		}
		for i := range 4 {
			if created := add(minute.Add(time.Duration(i)*time.Second), "192.0.2.1"); created != (i == 0) {
				t.Fatalf("event %d: created = %v", i, created)
			}
		}
		if !add(minute.Add(time.Second), "192.0.2.2") || !add(minute.Add(time.Minute), "192.0.2.1") {
			t.Fatal("another address or minute did not start a row")
		}
		add(minute.Add(time.Minute+time.Second), "192.0.2.1")
		es, err := s.ListAudit(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range es {
			got = append(got, fmt.Sprintf("%s×%d", e.ClientAddr, e.Count))
		}
		if want := "192.0.2.1×2 192.0.2.2×1 192.0.2.1×4"; strings.Join(got, " ") != want {
			t.Fatalf("rows %v, want %s", got, want)
		}
	})
}
