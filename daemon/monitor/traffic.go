package monitor

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Traffic history: one row per proxy and minute, kept this long.
const (
	PollInterval   = time.Minute
	HistoryKeep    = 7 * 24 * time.Hour
	HistoryWindow  = 24 * time.Hour
	HistoryBuckets = 96 // 15-minute points over HistoryWindow
)

// Traffic polls frps's per-proxy counters into SQLite: monotonic totals
// (for /metrics) and 1-minute history (for the dashboard's charts).
type Traffic struct {
	Store *store.Store
	FRPS  *FRPS
	Log   *slog.Logger
	Now   func() time.Time
	// Edge names this edge's frps on a store edges share (PostgreSQL):
	// each edge's totals of a proxy are kept apart ("" on SQLite).
	Edge string

	// mu serializes polls: the minute loop and scrapes both poll.
	mu      sync.Mutex
	lastErr error
	polled  bool
}

func (t *Traffic) now() time.Time {
	if t.Now == nil {
		return time.Now()
	}
	return t.Now()
}

func (t *Traffic) log() *slog.Logger {
	if t.Log == nil {
		return slog.Default()
	}
	return t.Log
}

// delta is what a proxy carried since the previous poll. frps's counters
// count today only and restart with frps: a new day or a counter smaller
// than before means they restarted, and everything they show is new. The
// bytes of connections that closed between the last poll and the restart
// are lost (at most one poll interval's worth).
func delta(prev store.TrafficSeen, in, out int64, day string) (int64, int64) {
	if !prev.Known || prev.Day != day || in < prev.In || out < prev.Out {
		return in, out
	}
	return in - prev.In, out - prev.Out
}

// Poll reads frps once and records what changed.
func (t *Traffic) Poll(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.poll(ctx)
	t.lastErr, t.polled = err, true
	return err
}

// Up reports whether the last poll reached frps.
func (t *Traffic) Up() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.polled && t.lastErr == nil
}

func (t *Traffic) poll(ctx context.Context) error {
	proxies, err := t.FRPS.Proxies(ctx)
	if err != nil {
		return err
	}
	// frps keeps the figures of a deleted machine's or tunnel's proxy for
	// days: they are not ours to count any more (and pruning dropped
	// their totals, so they would count twice).
	machines, err := t.Store.ListMachines(ctx)
	if err != nil {
		return err
	}
	tunnels, err := t.Store.ListTunnels(ctx, 0)
	if err != nil {
		return err
	}
	live := map[[2]int64]bool{}
	for _, m := range machines {
		live[[2]int64{m.ID, 0}] = true
	}
	for _, tu := range tunnels {
		live[[2]int64{tu.MachineID, tu.ID}] = true
	}
	now := t.now()
	var obs []store.TrafficObservation
	for _, p := range proxies {
		m, tun, ok := parseProxy(p.Name)
		if !ok || !live[[2]int64{m, tun}] {
			continue
		}
		obs = append(obs, store.TrafficObservation{Proxy: p.Name, MachineID: m, TunnelID: tun,
			DayIn: p.TodayTrafficIn, DayOut: p.TodayTrafficOut, Conns: p.CurConns})
	}
	return t.Store.ApplyTrafficOf(ctx, t.Edge, now.Unix()/60, now.Format("2006-01-02"), obs, delta)
}

// Run polls every PollInterval and prunes history older than HistoryKeep,
// until ctx ends.
func (t *Traffic) Run(ctx context.Context) {
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	failing := false
	for {
		if err := t.Poll(ctx); err != nil && !failing {
			t.log().Warn("traffic: frps's dashboard API does not answer; retrying every minute", "err", err)
			failing = true
		} else if err == nil {
			failing = false
		}
		if err := t.Prune(ctx); err != nil && ctx.Err() == nil {
			t.log().Error("traffic: pruning history failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Prune deletes history older than HistoryKeep, and the totals of
// deleted machines.
func (t *Traffic) Prune(ctx context.Context) error {
	_, err := t.Store.PruneTraffic(ctx, t.now().Add(-HistoryKeep).Unix()/60)
	return err
}

// Series is a machine's or tunnel's traffic over HistoryWindow: bytes in
// and out per point (oldest first, BucketMinutes each), their sums, and
// the connections open now.
type Series struct {
	In            []int64 `json:"in"`
	Out           []int64 `json:"out"`
	BytesIn       int64   `json:"bytes_in"`
	BytesOut      int64   `json:"bytes_out"`
	Connections   int64   `json:"connections"`
	BucketMinutes int     `json:"bucket_minutes"`
}

// History is every machine's and tunnel's Series, by id. A machine's
// series covers all its proxies (ssh, agent and its tunnels).
type History struct {
	Since    time.Time         `json:"since"`
	Machines map[int64]*Series `json:"machines"`
	Tunnels  map[int64]*Series `json:"tunnels"`
}

// History returns the last HistoryWindow of traffic.
func (t *Traffic) History(ctx context.Context) (History, error) {
	bucket := int64(HistoryWindow/time.Minute) / HistoryBuckets
	nowMin := t.now().Unix() / 60
	from := (nowMin/bucket+1)*bucket - HistoryBuckets*bucket
	h := History{Since: time.Unix(from*60, 0).UTC(), Machines: map[int64]*Series{}, Tunnels: map[int64]*Series{}}
	get := func(m map[int64]*Series, id int64) *Series {
		s := m[id]
		if s == nil {
			s = &Series{In: make([]int64, HistoryBuckets), Out: make([]int64, HistoryBuckets), BucketMinutes: int(bucket)}
			m[id] = s
		}
		return s
	}
	rows, err := t.Store.TrafficSince(ctx, from, bucket)
	if err != nil {
		return h, err
	}
	for _, r := range rows {
		i := (r.Minute - from) / bucket
		if i < 0 || i >= HistoryBuckets {
			continue
		}
		targets := []*Series{get(h.Machines, r.MachineID)}
		if r.TunnelID != 0 {
			targets = append(targets, get(h.Tunnels, r.TunnelID))
		}
		for _, s := range targets {
			s.In[i] += r.In
			s.Out[i] += r.Out
			s.BytesIn += r.In
			s.BytesOut += r.Out
		}
	}
	totals, err := t.Store.TrafficTotals(ctx)
	if err != nil {
		return h, err
	}
	sort.Slice(totals, func(i, j int) bool { return totals[i].Proxy < totals[j].Proxy })
	for _, tt := range totals {
		get(h.Machines, tt.MachineID).Connections += tt.Conns
		if tt.TunnelID != 0 {
			get(h.Tunnels, tt.TunnelID).Connections += tt.Conns
		}
	}
	return h, nil
}
