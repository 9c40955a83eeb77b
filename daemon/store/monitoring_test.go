package store

import (
	"context"
	"fmt"
	"testing"
)

// TestApplyTrafficAccumulates: a proxy's second poll in the same minute
// adds to its totals and to that minute's sample.
func TestApplyTrafficAccumulates(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		const minute = 30_000_000
		for _, seen := range []int64{10, 25, 40} {
			obs := []TrafficObservation{{Proxy: "m1.ssh", MachineID: 1, DayIn: seen, DayOut: 2 * seen, Conns: 1}}
			if err := s.ApplyTraffic(ctx, minute, "2027-01-15", obs, sinceLast); err != nil {
				t.Fatal(err)
			}
		}
		totals, err := s.TrafficTotals(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(totals); got != "[{m1.ssh 1 0 40 80 1}]" {
			t.Fatalf("totals %s", got)
		}
		samples, err := s.TrafficSince(ctx, minute, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(samples); got != fmt.Sprintf("[{1 0 %d 40 80}]", minute) {
			t.Fatalf("samples %s", got)
		}
	})
}

// TestApplyTrafficPerEdge: two edges' frps count the same proxy, each its
// own traffic; each edge's poll leaves the other's totals and open
// connections alone.
func TestApplyTrafficPerEdge(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		const minute = 30_000_000
		apply := func(edge string, in, conns int64) {
			t.Helper()
			obs := []TrafficObservation{{Proxy: "m1.tunnel-2", MachineID: 1, TunnelID: 2, DayIn: in, DayOut: in, Conns: conns}}
			if err := s.ApplyTrafficOf(ctx, edge, minute, "2027-01-15", obs, sinceLast); err != nil {
				t.Fatal(err)
			}
		}
		apply("edge-a", 100, 3)
		apply("edge-b", 10, 1)
		apply("edge-a", 150, 2)
		apply("edge-b", 40, 1)
		totals, err := s.TrafficTotals(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(totals); got != "[{edge-a/m1.tunnel-2 1 2 150 150 2} {edge-b/m1.tunnel-2 1 2 40 40 1}]" {
			t.Fatalf("totals %s", got)
		}
		// A's next poll finds no connection: B's stays.
		if err := s.ApplyTrafficOf(ctx, "edge-a", minute, "2027-01-15", nil, sinceLast); err != nil {
			t.Fatal(err)
		}
		totals, _ = s.TrafficTotals(ctx)
		if got := fmt.Sprint(totals); got != "[{edge-a/m1.tunnel-2 1 2 150 150 0} {edge-b/m1.tunnel-2 1 2 40 40 1}]" {
			t.Fatalf("totals after A's empty poll %s", got)
		}
		samples, err := s.TrafficSince(ctx, minute, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(samples); got != fmt.Sprintf("[{1 2 %d 190 190}]", minute) {
			t.Fatalf("samples %s", got)
		}
	})
}

// sinceLast is ApplyTraffic's delta for counters that only grow: what
// was counted since the previous poll (all of it on the first).
func sinceLast(prev TrafficSeen, in, out int64, day string) (int64, int64) {
	if !prev.Known {
		return in, out
	}
	return in - prev.In, out - prev.Out
}
