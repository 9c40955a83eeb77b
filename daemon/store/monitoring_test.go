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
		delta := func(prev TrafficSeen, in, out int64, day string) (int64, int64) {
			if !prev.Known {
				return in, out
			}
			return in - prev.In, out - prev.Out
		}
		for _, seen := range []int64{10, 25, 40} {
			obs := []TrafficObservation{{Proxy: "m1.ssh", MachineID: 1, DayIn: seen, DayOut: 2 * seen, Conns: 1}}
			if err := s.ApplyTraffic(ctx, minute, "2027-01-15", obs, delta); err != nil {
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
