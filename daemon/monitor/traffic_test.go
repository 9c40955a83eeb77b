package monitor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// frps's counters count one day and restart with frps: a smaller counter
// or another day means everything shown is new.
func TestDelta(t *testing.T) {
	for _, c := range []struct {
		name            string
		prev            store.TrafficSeen
		in, out         int64
		day             string
		wantIn, wantOut int64
	}{
		{"first sight", store.TrafficSeen{}, 100, 50, "2026-03-01", 100, 50},
		{"growth", store.TrafficSeen{In: 100, Out: 50, Day: "2026-03-01", Known: true}, 150, 70, "2026-03-01", 50, 20},
		{"frps restarted", store.TrafficSeen{In: 100, Out: 50, Day: "2026-03-01", Known: true}, 30, 60, "2026-03-01", 30, 60},
		{"midnight, already past the old figure", store.TrafficSeen{In: 100, Out: 50, Day: "2026-03-01", Known: true}, 300, 300, "2026-03-02", 300, 300},
		{"nothing new", store.TrafficSeen{In: 100, Out: 50, Day: "2026-03-01", Known: true}, 100, 50, "2026-03-01", 0, 0},
	} {
		in, out := delta(c.prev, c.in, c.out, c.day)
		if in != c.wantIn || out != c.wantOut {
			t.Errorf("%s: delta = %d, %d; want %d, %d", c.name, in, out, c.wantIn, c.wantOut)
		}
	}
}

// History is kept at one row per proxy and minute for 7 days, then pruned;
// the dashboard's series covers the last 24 hours.
func TestHistoryAndPrune(t *testing.T) {
	ctx := context.Background()
	st, m, tun := StoreWithTunnel(t, "a")
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	tr := &Traffic{Store: st, Now: func() time.Time { return now }}
	apply := func(at time.Time, proxy string, tunnel, in int64) {
		t.Helper()
		err := st.ApplyTraffic(ctx, at.Unix()/60, at.Format("2006-01-02"),
			[]store.TrafficObservation{{Proxy: proxy, MachineID: m.ID, TunnelID: tunnel, DayIn: in, DayOut: in / 2}}, delta)
		if err != nil {
			t.Fatal(err)
		}
	}
	tp := fmt.Sprintf("m%d.tunnel-%d", m.ID, tun.ID)
	apply(now.Add(-8*24*time.Hour), tp, tun.ID, 1000) // pruned
	apply(now.Add(-6*24*time.Hour), tp, tun.ID, 2000) // kept, outside the chart
	apply(now.Add(-2*time.Hour), tp, tun.ID, 2500)    // same day as the next: +500
	apply(now.Add(-90*time.Minute), tp, tun.ID, 2600) // +100
	apply(now.Add(-1*time.Minute), "m1.ssh", 0, 7)    // the machine's own proxy
	if err := tr.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	var rows, oldest int64
	st.DB().QueryRow("SELECT COUNT(*), MIN(minute) FROM traffic_samples").Scan(&rows, &oldest)
	if rows != 4 || oldest != now.Add(-6*24*time.Hour).Unix()/60 {
		t.Fatalf("after pruning: %d rows, oldest minute %d", rows, oldest)
	}
	h, err := tr.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ts := h.Tunnels[tun.ID]
	if ts == nil || ts.BytesIn != 2500+100 || len(ts.In) != HistoryBuckets {
		t.Fatalf("tunnel series: %+v", ts)
	}
	// 2 h ago and 90 min ago fall in different 15-minute points.
	nonzero := 0
	for _, v := range ts.In {
		if v != 0 {
			nonzero++
		}
	}
	if nonzero != 2 {
		t.Fatalf("tunnel points: %v", ts.In)
	}
	if ms := h.Machines[m.ID]; ms == nil || ms.BytesIn != 2600+7 {
		t.Fatalf("machine series: %+v", ms)
	}
	// Totals outlive the pruned rows.
	tot, _ := st.TrafficTotals(ctx)
	if len(tot) != 2 || tot[1].Proxy != tp || tot[1].In != 1000+2000+2500+100 {
		t.Fatalf("totals: %+v", tot)
	}
}
