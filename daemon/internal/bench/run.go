package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Figure is one measurement: Key names it on the command line.
type Figure struct {
	Key string
	// World figures share one World; the others start what they need.
	World bool
	// Once figures take their own medians (the fleet: Options.FleetRuns
	// fleets of each size): measured in the first round only.
	Once bool
	Run  func(ctx context.Context, o Options, w *World) Row
}

// Figures lists every figure of `make bench`, in BENCH.md's order.
var Figures = []Figure{
	{Key: "api", World: true, Run: func(_ context.Context, _ Options, w *World) Row { return w.APIThroughput() }},
	// The VPS as deployed: its processes on a CPU of their own (pin.go).
	{Key: "http-pinned", World: true, Run: func(_ context.Context, _ Options, w *World) Row { return w.HTTPPinned() }},
	{Key: "openloop-pinned", World: true, Run: func(_ context.Context, _ Options, w *World) Row { return w.pinnedRow(w.HTTPOpenLoop) }},
	{Key: "tcp-pinned", World: true, Run: func(_ context.Context, _ Options, w *World) Row { return w.TCPPinned() }},
	{Key: "gate-pinned", World: true, Run: func(_ context.Context, _ Options, w *World) Row { return w.pinnedRow(w.GateCheck) }},
	{Key: "udp-pinned", World: true, Run: func(_ context.Context, _ Options, w *World) Row { return w.pinnedRow(w.UDPThroughput) }},
	// The same, every process free to run on every CPU.
	{Key: "http", World: true, Run: func(_ context.Context, _ Options, w *World) Row { return w.HTTPClosedLoop() }},
	{Key: "openloop", World: true, Run: func(_ context.Context, _ Options, w *World) Row { return unpinned(w.HTTPOpenLoop()) }},
	{Key: "tcp", World: true, Run: func(_ context.Context, _ Options, w *World) Row { return unpinned(w.TCPThroughput()) }},
	{Key: "gate", World: true, Run: func(_ context.Context, _ Options, w *World) Row { return unpinned(w.GateCheck()) }},
	{Key: "disconnect", World: true, Run: func(ctx context.Context, _ Options, w *World) Row { return w.Disconnect(ctx) }},
	{Key: "silentcut", World: true, Run: func(ctx context.Context, _ Options, w *World) Row { return w.SilentCut(ctx) }},
	{Key: "wss", Run: func(_ context.Context, o Options, _ *World) Row { return WSSTransport(o) }},
	{Key: "coldstart", Run: func(_ context.Context, o Options, _ *World) Row { return ColdStart(o, 5) }},
	{Key: "idlerss", Run: func(_ context.Context, o Options, _ *World) Row { return IdleRSS(o) }},
	{Key: "registrations", Run: func(_ context.Context, o Options, _ *World) Row { return Registrations(o) }},
	{Key: "render", Run: func(_ context.Context, _ Options, _ *World) Row { return Render(10000) }},
	{Key: "loadedrss", Run: func(_ context.Context, o Options, _ *World) Row { return LoadedRSS(o) }},
	{Key: "pgapi", Run: func(_ context.Context, o Options, _ *World) Row { return PostgresAPI(o) }},
	{Key: "pgregistrations", Run: func(_ context.Context, o Options, _ *World) Row { return PostgresRegistrations(o) }},
	{Key: "edgechange", Run: func(_ context.Context, o Options, _ *World) Row { return EdgeChange(o) }},
	{Key: "edgedeath", Run: func(_ context.Context, o Options, _ *World) Row { return EdgeDeath(o) }},
	{Key: "chaos", Run: func(_ context.Context, o Options, _ *World) Row { return Chaos(o) }},
	{Key: "fleet", Once: true, Run: func(_ context.Context, o Options, _ *World) Row { return Fleet(o) }},
	{Key: "pgfleet", Once: true, Run: func(_ context.Context, o Options, _ *World) Row { return PostgresFleet(o) }},
}

// means says, for the figures whose value speaks for itself, what it
// means for an operator's VPS (%v: the row's value, in its unit).
var means = map[string]string{
	"openloop-pinned": "At half the rate Caddy alone serves within 20 ms, HTTP through the tunnel answers 99 %% of requests within %.0f ms.",
	"gate-pinned":     "An access gate checks a signed-in visitor in about %.0f µs (median): a gated site is not noticeably slower.",
	"wss":             "A machine that can only get out on port 443 (the wss transport, through Caddy and the daemon) gets about %.2g × the requests a second of a machine on the direct port.",
	"disconnect":      "A machine whose tunnel client stops shows offline in the dashboard within %.2g s.",
	"silentcut":       "A machine whose network goes silent (no reset, no close) shows offline within %.0f s.",
	"coldstart":       "The dashboard answers %.0f ms after its first connection starts the daemon: it can stay stopped while unused.",
	"idlerss":         "The daemon needs about %.0f MB of memory when idle.",
	"registrations":   "Machines join at about %.0f a second when many join at once.",
	"render":          "Every generated config for 10,000 tunnels is rendered in %.0f ms.",
	"loadedrss":       "With 1,000 machines and 10,000 tunnels the daemon needs about %.0f MB of memory.",
	"pgapi":           "On PostgreSQL the dashboard's API answers at %.2g × its rate on SQLite.",
	"pgregistrations": "On PostgreSQL machines join at %.2g × the rate on SQLite.",
	"edgechange":      "A change made on one edge is applied on the others within %.2g s.",
	"edgedeath":       "When an edge dies, clients that retry the other address are answered within %.2g s.",
	"chaos":           "After a storm of changes and faults, every edge is back as the database says within %.0f s, with nobody's help.",
	"fleet":           "With the largest fleet measured on one edge, a tunnel changed on one machine is applied on it within %.0f ms (p99).",
	"pgfleet":         "The same fleet with the daemon on PostgreSQL: a tunnel changed on one machine is applied within %.0f ms (p99).",
}

// Select returns the figures whose keys are in only (all when empty).
func Select(only []string) ([]Figure, error) {
	if len(only) == 0 {
		return Figures, nil
	}
	var out []Figure
	for _, k := range only {
		found := false
		for _, f := range Figures {
			if f.Key == k {
				out = append(out, f)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("no figure %q", k)
		}
	}
	return out, nil
}

// Run measures each figure `runs` times and keeps the run with the median
// value. A World is started anew for each round of world figures.
func Run(ctx context.Context, o Options, figs []Figure, runs int) ([]Row, error) {
	results := make([][]Row, len(figs))
	base := o
	if base.pg == nil {
		base.pg = &pgServer{}
		defer base.pg.stop()
	}
	for r := 0; r < runs; r++ {
		// Each round starts from empty data directories: a daemon set up in
		// an earlier round would refuse the setup.
		o := base
		o.Dir = filepath.Join(base.Dir, fmt.Sprintf("run%d", r+1))
		if err := os.MkdirAll(o.Dir, 0o700); err != nil {
			return nil, err
		}
		var w *World
		for i, f := range figs {
			if f.Once && r > 0 {
				continue
			}
			if f.World && w == nil {
				var err error
				o.logf("run %d: starting daemon, frps, frpc and caddy", r+1)
				if w, err = NewWorld(ctx, o); err != nil {
					return nil, err
				}
				defer w.Close()
			}
			o.logf("run %d: %s", r+1, f.Key)
			row := f.Run(ctx, o, w)
			row.Command = "go run ./daemon/cmd/tunnelsvc-bench -only " + f.Key
			o.logf("run %d: %s: %s", r+1, f.Key, row.Measured)
			results[i] = append(results[i], row)
		}
		if w != nil {
			w.Close()
		}
	}
	rows := make([]Row, len(figs))
	for i, rs := range results {
		sort.SliceStable(rs, func(a, b int) bool { return rs[a].Value < rs[b].Value })
		rows[i] = rs[len(rs)/2]
		if m := means[figs[i].Key]; m != "" && rows[i].Means == "" && rows[i].Value > 0 && !strings.Contains(rows[i].Measured, "error:") {
			rows[i].Means = fmt.Sprintf(m, rows[i].Value)
		}
		if len(rs) > 1 {
			var vals []string
			for _, x := range rs {
				vals = append(vals, fmt.Sprintf("%.3g", x.Value))
			}
			rows[i].Measured += fmt.Sprintf(" (median of %d runs; values %s)", len(rs), strings.Join(vals, ", "))
		}
	}
	return rows, nil
}

// WriteMarkdown writes BENCH.md.
func WriteMarkdown(w io.Writer, rows []Row, o Options, runs int) {
	fmt.Fprintf(w, "# Benchmarks\n\nMeasured by `make bench` on %s: %d CPUs (%s/%s, %s), %d run(s) per figure, %s load phases. ",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), runs, o.Duration)
	fmt.Fprintf(w, "Every ratio is taken against a baseline measured in the same run; the value column is that ratio, or the figure itself where there is no baseline. "+
		"The tunnel figures also give, measured in the same turns, two bare TLS relays in the tunnel's place: processes that only accept, dial and copy (see docs/development.md).\n\n")
	fmt.Fprintf(w, "| figure | goal | measured | value | baseline | goal met | reproduce |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		met := "no"
		if r.Met {
			met = "yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.3g | %s | %s | `%s` |\n", r.Figure, r.Goal, strings.ReplaceAll(r.Measured, "|", "/"), r.Value, r.Baseline, met, r.Command)
	}
	var means []string
	for _, r := range rows {
		if r.Means != "" {
			means = append(means, "- "+r.Means)
		}
	}
	if len(means) > 0 {
		fmt.Fprintf(w, "\n## What it means for a VPS\n\n%s\n", strings.Join(means, "\n"))
	}
	for _, r := range rows {
		if r.Detail != "" {
			fmt.Fprintf(w, "\n%s", r.Detail)
		}
	}
}
