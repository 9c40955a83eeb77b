package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// The fleet figures: n machines join one edge through the real bootstrap
// API, and run in tools/fleetsim (frp's own client package and the real
// agent's handler, many machines in one process). The edge is the daemon
// and frps as `make bench` runs them; what they use is measured apart
// from the simulator's.

// fleetDomain is the cluster's domain in the fleet figures.
const fleetDomain = "fleet.example.test"

// fleet is one edge with n simulated machines joined.
type fleet struct {
	o       Options
	n       int
	d       *Daemon
	frps    *Proc
	sim     *Proc
	control string
	ids     []int64 // the machines' ids, in name order
	tunnels []int64 // each machine's HTTP tunnel, in the same order
}

// FleetState is fleetsim's GET /state, one machine.
type FleetState struct {
	Name      string `json:"name"`
	Applied   int64  `json:"applied"`
	Up        bool   `json:"up"`
	Starts    int64  `json:"starts"`
	LastError string `json:"last_error"`
}

// startFleet starts an edge, joins n machines through POST /api/bootstrap,
// gives each an HTTP tunnel, and starts the simulator with them: the
// round-th fleet of n (each in a directory of its own).
func (o Options) startFleet(n, round int) (f *fleet, err error) {
	f = &fleet{o: o, n: n}
	defer func() {
		if err != nil {
			f.stop()
		}
	}()
	dir := filepath.Join(o.Dir, fmt.Sprintf("fleet-%d-%d", n, round))
	// The edge is set up as an operator does (POST /api/local/install),
	// which needs systemd: its stand-in's.
	os.MkdirAll(dir, 0o755)
	bins, err := o.standInEdge()
	if err != nil {
		return f, err
	}
	// Three ports a machine: its ssh, its agent and its web app. No
	// --server-host: the address machines dial is the installation's.
	url := ""
	if o.fleetOnPostgres {
		if url, err = o.postgresURL(); err != nil {
			return f, err
		}
	}
	if f.d, err = StartDaemonArgs(bins, dir, 3*n+10, url, "--server-host", ""); err != nil {
		return f, err
	}
	if err := f.d.Setup(); err != nil {
		return f, err
	}
	if err := f.install(fleetDomain, "127.0.0.1"); err != nil {
		return f, err
	}
	if f.frps, err = StartFRPS(o.Bins, f.d); err != nil {
		return f, err
	}
	t0 := time.Now()
	regs, err := f.join()
	if err != nil {
		return f, err
	}
	o.logf("fleet %d: %d machines joined in %s, each with an HTTP tunnel", n, n, time.Since(t0).Round(time.Millisecond))
	file := filepath.Join(dir, "machines.json")
	b, _ := json.Marshal(regs)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return f, err
	}
	bin := filepath.Join(dir, "fleetsim")
	// Built as make builds frpc (static, frp's noweb tag, -trimpath), so
	// Go's cache already holds most of frp's packages.
	build := exec.Command("go", "build", "-tags", "noweb", "-trimpath", "-o", bin, ".")
	build.Dir = filepath.Join(o.Bins.Root, "tools", "fleetsim")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return f, fmt.Errorf("building tools/fleetsim: %v: %s", err, out)
	}
	if f.sim, err = StartProc("fleetsim", bin, "--machines", file, "--dir", dir); err != nil {
		return f, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for f.control == "" {
		if line, _, _ := strings.Cut(f.sim.Out.String(), "\n"); strings.HasPrefix(line, "control ") {
			f.control = strings.TrimPrefix(line, "control ")
		} else if time.Now().After(deadline) || !f.sim.Running() {
			return f, fmt.Errorf("fleetsim gave no control address: %s", tail(f.sim.Out.String(), 8))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return f, nil
}

// install sets the edge up with domain and the server host machines
// dial (no web proxy: the fleet's tunnels are not served by Caddy here),
// and waits until the installation is done.
func (f *fleet) install(domain, host string) error {
	body := map[string]any{"domain": domain, "server_host": host, "skip_webproxy": true}
	if err := f.d.Call(f.d.Client, "POST", "/api/local/install", body, nil); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var st struct {
			Operation   string    `json:"operation"`
			Domain      string    `json:"domain"`
			ServerHost  string    `json:"server_host"`
			InstalledAt time.Time `json:"installed_at"`
		}
		if err := f.d.Call(f.d.Client, "GET", "/api/local/status", nil, &st); err == nil && st.Operation == "" &&
			st.Domain == domain && st.ServerHost == host && !st.InstalledAt.IsZero() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the installation with domain %s did not finish within a minute: %s", domain, tail(f.d.Out.String(), 8))
		}
	}
}

// join registers the fleet's machines (m00001 …) as bootstrap.sh does,
// 16 at a time, and gives each an HTTP tunnel.
func (f *fleet) join() ([]map[string]string, error) {
	regs := make([]map[string]string, f.n)
	err := f.each(func(i int) error {
		name := fleetName(i)
		tok, err := f.d.NewToken()
		if err != nil {
			return fmt.Errorf("joining %s: %w", name, err)
		}
		reg, err := f.d.Register(tok, name)
		if err != nil {
			return fmt.Errorf("joining %s: %w", name, err)
		}
		regs[i] = map[string]string{"name": name, "revtunnel_client_config": reg.ClientConfig, "agent_token": reg.AgentToken}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var ms []Machine
	if err := f.d.Call(f.d.Client, "GET", "/api/machines", nil, &ms); err != nil {
		return nil, err
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	for _, m := range ms {
		f.ids = append(f.ids, m.ID)
	}
	if len(f.ids) != f.n {
		return nil, fmt.Errorf("%d machines listed, %d joined", len(f.ids), f.n)
	}
	f.tunnels = make([]int64, f.n)
	err = f.each(func(i int) error {
		t, err := f.d.AddTunnel(f.ids[i], "web", "http", 8080, fmt.Sprintf("w%05d", i+1))
		if err != nil {
			return fmt.Errorf("a tunnel for machine %d: %w (the daemon: %s)", f.ids[i], err, lastError(f.d.Out.String()))
		}
		f.tunnels[i] = t.ID
		return nil
	})
	return regs, err
}

// each runs do for every machine (0 … n-1), 16 at a time, and stops at
// the first error, which it gives.
func (f *fleet) each(do func(i int) error) error {
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(16)
	for i := range f.n {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error { return do(i) })
	}
	return g.Wait()
}

// state is what the simulator says of each machine.
func (f *fleet) state() ([]FleetState, error) {
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get("http://" + f.control + "/state")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []FleetState
	err = json.NewDecoder(bufio.NewReader(resp.Body)).Decode(&out)
	return out, err
}

// machines is GET /api/machines, and how long it took.
func (f *fleet) machines() ([]fleetMachine, time.Duration, error) {
	return f.machinesAt("/api/machines")
}

// machinesAt is GET path (/api/machines with a query), and how long it took.
func (f *fleet) machinesAt(path string) ([]fleetMachine, time.Duration, error) {
	var ms []fleetMachine
	t0 := time.Now()
	err := f.d.Call(f.d.Client, "GET", path, nil, &ms)
	return ms, time.Since(t0), err
}

// fleetMachine is what the fleet figures read of GET /api/machines.
type fleetMachine struct {
	ID     int64  `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
	Config struct {
		Desired int64 `json:"desired_generation"`
		Applied int64 `json:"applied_generation"`
	} `json:"config"`
}

// settled says how many machines are online with their desired config
// applied, as the daemon sees them.
func settled(ms []fleetMachine) (online, applied int) {
	for _, m := range ms {
		if m.Status == "online" {
			online++
		}
		if m.Config.Applied == m.Config.Desired {
			applied++
		}
	}
	return online, applied
}

// waitSettled waits until every machine is online with its config
// applied, logging progress every 5 s; it gives how long that took.
func (f *fleet) waitSettled(what string, limit time.Duration) (time.Duration, error) {
	t0 := time.Now()
	lastLog := t0
	for {
		ms, _, err := f.machines()
		if err == nil {
			online, applied := settled(ms)
			if online == f.n && applied == f.n {
				return time.Since(t0), nil
			}
			if time.Since(lastLog) > 5*time.Second {
				f.o.logf("fleet %d: %s: %d online, %d applied after %s", f.n, what, online, applied, time.Since(t0).Round(time.Second))
				lastLog = time.Now()
			}
			if time.Since(t0) > limit {
				return 0, fmt.Errorf("%s: %d of %d online, %d applied after %s%s", what, online, f.n, applied, limit, f.whyNot())
			}
		}
		// Every row each time: not more often than the dashboard would.
		time.Sleep(time.Second)
	}
}

// whyNot is the first reasons the simulator gives for machines not up.
func (f *fleet) whyNot() string {
	st, err := f.state()
	if err != nil {
		return "; fleetsim: " + err.Error()
	}
	seen := map[string]int{}
	for _, s := range st {
		if !s.Up {
			seen[s.LastError]++
		}
	}
	var out []string
	for e, n := range seen {
		out = append(out, fmt.Sprintf("%d down (%q)", n, e))
	}
	sort.Strings(out)
	return "; " + strings.Join(out, ", ")
}

func (f *fleet) stop() {
	for _, p := range []*Proc{f.sim, f.frps} {
		if p != nil {
			p.Kill(syscall.SIGTERM)
		}
	}
	if f.d != nil {
		f.d.Stop()
	}
}

// fleetFigures is what one fleet of n machines measured.
type fleetFigures struct {
	N                    int
	Runs                 int           // fleets taken together (medianFleet); 0 for one
	Join, Settle         time.Duration // all joined; all online with their config applied
	DaemonRSS, FRPSRSS   int64         // at steady state, bytes
	SimRSS               int64
	DaemonCPU, FRPSCPU   float64         // share of one CPU at steady state
	PostgresCPU          float64         // the PostgreSQL server's, when the daemon is on it
	Change               []time.Duration // one tunnel changed → applied, sorted
	DomainAll            time.Duration
	DomainCurve          []string // "50 % at 1.2 s" …
	Restart              time.Duration
	RestartPeakDaemonRSS int64
	RateRefused          int
	List                 time.Duration // GET /api/machines, median
	Page, Search         time.Duration // a page of 100, a search: median
}

// measureFleet runs the round-th fleet of n and measures it.
func (o Options) measureFleet(n, round int) (r fleetFigures, err error) {
	r.N = n
	t0 := time.Now()
	f, err := o.startFleet(n, round)
	if err != nil {
		return r, err
	}
	defer f.stop()
	r.Join = time.Since(t0)
	if r.Settle, err = f.waitSettled("start", 5*time.Minute+time.Duration(n)*20*time.Millisecond); err != nil {
		return r, err
	}
	o.logf("fleet %d: all online with their config applied %s after fleetsim started", n, r.Settle.Round(time.Millisecond))
	// Steady state: heartbeats every 10 s, pings, reconcile passes.
	o.settle(10 * time.Second)
	window := time.Duration(float64(30*time.Second) * max(min(o.Settle, 1), 0.1))
	if o.Settle == 0 {
		window = 30 * time.Second
	}
	dc, fc, pc := f.d.CPU(), f.frps.CPU(), o.pgCPU()
	time.Sleep(window)
	r.DaemonCPU = float64(f.d.CPU()-dc) / float64(window)
	r.FRPSCPU = float64(f.frps.CPU()-fc) / float64(window)
	r.PostgresCPU = float64(o.pgCPU()-pc) / float64(window)
	r.DaemonRSS, _ = f.d.RSS()
	r.FRPSRSS, _ = f.frps.RSS()
	r.SimRSS, _ = f.sim.RSS()
	o.logf("fleet %d: steady: daemon %.1f MB and %.1f %% of a CPU, frps %.1f MB and %.1f %% (fleetsim %.0f MB)",
		n, mb(r.DaemonRSS), 100*r.DaemonCPU, mb(r.FRPSRSS), 100*r.FRPSCPU, mb(r.SimRSS))
	// A page of 100 from the middle of the fleet, and a search the
	// daemon answers over every machine.
	cursor, after := f.ids[len(f.ids)/2], 0
	for _, id := range f.ids {
		if id > cursor {
			after++
		}
	}
	if r.Page, err = f.listTime(fmt.Sprintf("/api/machines?limit=100&cursor=%d", cursor), min(100, after)); err != nil {
		return r, err
	}
	if r.Search, err = f.listTime("/api/machines?limit=100&q="+url.QueryEscape(fleetName(f.n-1)), 1); err != nil {
		return r, err
	}
	if r.List, err = f.listTime("/api/machines", f.n); err != nil {
		return r, err
	}
	if r.Change, err = f.tunnelChanges(o.fleetSamples()); err != nil {
		return r, err
	}
	slices.Sort(r.Change)
	if r.DomainAll, r.DomainCurve, err = f.domainChange(); err != nil {
		return r, err
	}
	if err := f.frpsRestart(&r); err != nil {
		return r, err
	}
	return r, nil
}

// fleetSamples is how many single changes are timed.
func (o Options) fleetSamples() int {
	if o.brief() {
		return 5
	}
	return 30
}

// listTime is the median time of GET path over 5 calls; want is how many
// rows it must give.
func (f *fleet) listTime(path string, want int) (time.Duration, error) {
	var ts []time.Duration
	for range 5 {
		ms, took, err := f.machinesAt(path)
		if err != nil {
			return 0, err
		}
		if len(ms) != want {
			return 0, fmt.Errorf("GET %s gave %d machines, want %d", path, len(ms), want)
		}
		ts = append(ts, took)
	}
	return median(ts), nil
}

// machineState is what the simulator says of one machine.
func (f *fleet) machineState(name string) (FleetState, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + f.control + "/state?name=" + name)
	if err != nil {
		return FleetState{}, err
	}
	defer resp.Body.Close()
	var out []FleetState
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out) != 1 {
		return FleetState{}, fmt.Errorf("fleetsim's state of %s: %v (%d)", name, err, len(out))
	}
	return out[0], nil
}

// tunnelChanges changes one machine's tunnel (its local port), k times on
// machines spread over the fleet, and times each from the API's answer
// to the machine's agent applying the new generation.
func (f *fleet) tunnelChanges(k int) ([]time.Duration, error) {
	var out []time.Duration
	for j := range k {
		i := (j*7919 + 13) % f.n
		name := fleetName(i)
		before, err := f.machineState(name)
		if err != nil {
			return nil, err
		}
		body := map[string]any{"local_port": 8081 + j}
		t0 := time.Now()
		if err := f.d.Call(f.d.Client, "PATCH", fmt.Sprintf("/api/tunnels/%d", f.tunnels[i]), body, nil); err != nil {
			return nil, err
		}
		for {
			st, err := f.machineState(name)
			if err != nil {
				return nil, err
			}
			if st.Applied > before.Applied {
				break
			}
			if time.Since(t0) > 30*time.Second {
				return nil, fmt.Errorf("%s did not apply its changed tunnel within 30 s (generation %d)", name, st.Applied)
			}
			time.Sleep(5 * time.Millisecond)
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// domainChange moves the edge to a new domain and server host (the
// operator installs again), which every machine's config names, and
// times until every agent applied it, with the curve. The new host is
// "localhost": the same edge, under another name.
func (f *fleet) domainChange() (time.Duration, []string, error) {
	before, err := f.state()
	if err != nil {
		return 0, nil, err
	}
	gen := map[string]int64{}
	for _, s := range before {
		gen[s.Name] = s.Applied
	}
	t0 := time.Now()
	if err := f.install("fleet2.example.test", "localhost"); err != nil {
		return 0, nil, err
	}
	var curve []string
	marks := []int{10, 50, 90, 99}
	limit := 10 * time.Minute
	for {
		st, err := f.state()
		if err != nil {
			return 0, nil, err
		}
		done := 0
		for _, s := range st {
			if s.Applied > gen[s.Name] {
				done++
			}
		}
		for len(marks) > 0 && done*100 >= marks[0]*f.n {
			curve = append(curve, fmt.Sprintf("%d %% at %s", marks[0], time.Since(t0).Round(10*time.Millisecond)))
			marks = marks[1:]
		}
		if done == f.n {
			took := time.Since(t0)
			f.o.logf("fleet %d: a new domain applied by every machine in %s (%s)", f.n, took.Round(10*time.Millisecond), strings.Join(curve, ", "))
			return took, curve, nil
		}
		if time.Since(t0) > limit {
			return 0, curve, fmt.Errorf("a new domain: %d of %d machines applied it within %s", done, f.n, limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// frpsRestart restarts frps and times until every machine is online with
// its config applied again (as the daemon sees it, and with its client
// logged in, as the simulator sees it), watching the daemon's memory
// meanwhile and counting logins the edge refused.
func (f *fleet) frpsRestart(r *fleetFigures) error {
	mark := len(f.d.Out.String())
	f.frps.Kill(syscall.SIGTERM)
	// The clients notice: their control connections end.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if st, err := f.state(); err == nil && up(st) == 0 {
			break
		}
	}
	t0 := time.Now()
	var err error
	if f.frps, err = StartFRPS(f.o.Bins, f.d); err != nil {
		return err
	}
	stop := make(chan struct{})
	var peak atomic.Int64
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, _ := f.d.RSS(); rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	defer close(stop)
	for {
		st, err := f.state()
		if err == nil && up(st) == f.n {
			break
		}
		if time.Since(t0) > 5*time.Minute {
			return fmt.Errorf("after frps restarted: %d of %d clients logged in within 5 minutes%s", up(st), f.n, f.whyNot())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := f.waitSettled("after frps restarted", 5*time.Minute); err != nil {
		return err
	}
	r.Restart = time.Since(t0)
	r.RestartPeakDaemonRSS = peak.Load()
	out := f.d.Out.String()
	if mark > len(out) { // the buffer started over
		mark = 0
	}
	r.RateRefused = strings.Count(out[mark:], "login refused")
	f.o.logf("fleet %d: every machine online again %s after frps restarted (%d logins refused; the daemon's RSS peaked at %.1f MB)",
		f.n, r.Restart.Round(10*time.Millisecond), r.RateRefused, mb(r.RestartPeakDaemonRSS))
	return nil
}

// up counts the machines whose client is logged in.
func up(st []FleetState) int {
	n := 0
	for _, s := range st {
		if s.Up {
			n++
		}
	}
	return n
}

// FleetSizes are the fleets `make bench` measures, so that growth shows.
var FleetSizes = []int{1000, 3000, 10000}

// Fleet measures a fleet of each of o's sizes (FleetSizes when none) and
// reports them side by side; the goals are judged at the largest.
func Fleet(o Options) Row { return fleetRow(o) }

// PostgresFleet is Fleet with the daemon on PostgreSQL (a database of its
// own on the bench's throwaway server) instead of SQLite. The
// PostgreSQL server's CPU is given apart from the edge's.
func PostgresFleet(o Options) Row {
	o.fleetOnPostgres = true
	return fleetRow(o)
}

func fleetRow(o Options) Row {
	engine := ""
	if o.fleetOnPostgres {
		engine = ", the daemon on PostgreSQL"
	}
	row := Row{
		Figure: "a fleet on one edge" + engine + " (tools/fleetsim: each machine frp's own client package and the real agent, joined through POST /api/bootstrap, " +
			"with ssh, agent and one HTTP tunnel): edge memory (daemon + frps), edge CPU at steady state, one tunnel change → applied, " +
			"a new domain and server host → applied by all, frps restarted → all online again, GET /api/machines (a page of 100, a search, every row)",
		Goal:     "at 10,000: ≤ 2 GB; ≤ 10 % of a CPU; p99 < 1 s; < 5 min; < 60 s with no login refused; (a page of 100) < 50 ms",
		Baseline: "none (absolute)",
	}
	sizes := o.FleetSizes
	if len(sizes) == 0 {
		sizes = FleetSizes
	}
	raiseFileLimit()
	files, most := fleetLimit()
	var each []string
	var last fleetFigures
	var grown []fleetFigures
	for _, n := range sizes {
		if n > most {
			each = append(each, fmt.Sprintf("**%d machines**: not measured here: frps holds about 4 open files a machine, and this machine "+
				"lets a process open %d (%d machines at most)", n, files, most))
			continue
		}
		var rs []fleetFigures
		for k := range max(o.FleetRuns, 1) {
			o.logf("fleet %d: fleet %d of %d", n, k+1, max(o.FleetRuns, 1))
			r, err := o.measureFleet(n, k+1)
			if err != nil {
				row.Measured = fmt.Sprintf("error at %d machines: %v", n, err)
				if len(each) > 0 {
					row.Measured += "; before it: " + strings.Join(each, "; ")
				}
				return row
			}
			rs = append(rs, r)
		}
		last = medianFleet(rs)
		each = append(each, last.String())
		grown = append(grown, last)
	}
	row.Measured = strings.Join(each, "; ")
	if last.N == 0 {
		return row
	}
	row.Detail = growthTable(grown, o.fleetOnPostgres)
	p99 := last.changeP99()
	row.Value = float64(p99) / float64(time.Millisecond)
	row.Met = last.N >= 10000 && last.edgeRSS() <= 2<<30 && last.DaemonCPU+last.FRPSCPU <= 0.10 && p99 < time.Second &&
		last.DomainAll < 5*time.Minute && last.Restart < time.Minute && last.RateRefused == 0 && last.Page < 50*time.Millisecond
	return row
}

// medianFleet is fleets of one size taken together: each figure the
// median of theirs; the single changes of all of them; the curve of the
// fleet whose domain change is the median; the most logins refused.
func medianFleet(rs []fleetFigures) fleetFigures {
	m := fleetFigures{N: rs[0].N, Runs: len(rs),
		Join:                 medianOf(rs, func(r fleetFigures) time.Duration { return r.Join }),
		Settle:               medianOf(rs, func(r fleetFigures) time.Duration { return r.Settle }),
		DaemonRSS:            medianOf(rs, func(r fleetFigures) int64 { return r.DaemonRSS }),
		FRPSRSS:              medianOf(rs, func(r fleetFigures) int64 { return r.FRPSRSS }),
		SimRSS:               medianOf(rs, func(r fleetFigures) int64 { return r.SimRSS }),
		DaemonCPU:            medianOf(rs, func(r fleetFigures) float64 { return r.DaemonCPU }),
		FRPSCPU:              medianOf(rs, func(r fleetFigures) float64 { return r.FRPSCPU }),
		PostgresCPU:          medianOf(rs, func(r fleetFigures) float64 { return r.PostgresCPU }),
		DomainAll:            medianOf(rs, func(r fleetFigures) time.Duration { return r.DomainAll }),
		Restart:              medianOf(rs, func(r fleetFigures) time.Duration { return r.Restart }),
		RestartPeakDaemonRSS: medianOf(rs, func(r fleetFigures) int64 { return r.RestartPeakDaemonRSS }),
		List:                 medianOf(rs, func(r fleetFigures) time.Duration { return r.List }),
		Page:                 medianOf(rs, func(r fleetFigures) time.Duration { return r.Page }),
		Search:               medianOf(rs, func(r fleetFigures) time.Duration { return r.Search }),
	}
	for _, r := range rs {
		m.Change = append(m.Change, r.Change...)
		m.RateRefused = max(m.RateRefused, r.RateRefused)
		if r.DomainAll == m.DomainAll && m.DomainCurve == nil {
			m.DomainCurve = r.DomainCurve
		}
	}
	slices.Sort(m.Change)
	return m
}

// medianOf is the median of one figure f of fleets rs.
func medianOf[T cmp.Ordered](rs []fleetFigures, f func(fleetFigures) T) T {
	xs := make([]T, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return median(xs)
}

// growthTable is BENCH.md's section on the fleet as it grows: a row a
// figure, a column a size, and how much the figure grew from the smallest
// fleet to the largest against how much the fleet did.
func growthTable(fs []fleetFigures, onPostgres bool) string {
	var b strings.Builder
	runs := max(fs[0].Runs, 1)
	title, key := "A fleet as it grows", "fleet"
	if onPostgres {
		title, key = "A fleet as it grows, the daemon on PostgreSQL", "pgfleet"
	}
	fmt.Fprintf(&b, "## %s\n\nThe %s figure at each size, each number the median of %s (`go run ./daemon/cmd/tunnelsvc-bench -only %s -runs %d -fleet ", title, key, fleets(runs), key, runs)
	var sizes []string
	for _, f := range fs {
		sizes = append(sizes, strconv.Itoa(f.N))
	}
	fmt.Fprintf(&b, "%s`). The last column is how much the figure grew from %d machines to %d (×%.1f as many machines): about as much is linear growth, more is faster than linear.\n\n",
		strings.Join(sizes, ","), fs[0].N, fs[len(fs)-1].N, float64(fs[len(fs)-1].N)/float64(fs[0].N))
	fmt.Fprintf(&b, "| figure | %s machines | grew |\n|---|%s---|\n", strings.Join(sizes, " machines | "), strings.Repeat("---|", len(fs)))
	type line struct {
		name string
		val  func(f fleetFigures) float64
		unit func(v float64) string
	}
	secs := func(v float64) string {
		return (time.Duration(v * float64(time.Second))).Round(100 * time.Millisecond).String()
	}
	ms := func(v float64) string { return fmt.Sprintf("%.1f ms", v*1000) }
	mbs := func(v float64) string { return fmt.Sprintf("%.0f MB", v) }
	pct := func(v float64) string { return fmt.Sprintf("%.1f %%", v) }
	lines := []line{
		{"all joined (POST /api/bootstrap)", func(f fleetFigures) float64 { return f.Join.Seconds() }, secs},
		{"then all online with their config applied", func(f fleetFigures) float64 { return f.Settle.Seconds() }, secs},
		{"edge memory: daemon + frps", func(f fleetFigures) float64 { return mb(f.edgeRSS()) }, mbs},
		{"of which the daemon", func(f fleetFigures) float64 { return mb(f.DaemonRSS) }, mbs},
		{"edge CPU at steady state (% of one)", func(f fleetFigures) float64 { return 100 * (f.DaemonCPU + f.FRPSCPU) }, pct},
		{"PostgreSQL server's CPU at steady state (% of one)", func(f fleetFigures) float64 { return 100 * f.PostgresCPU }, pct},
		{"one tunnel change → applied, median", func(f fleetFigures) float64 { return median(f.Change).Seconds() }, ms},
		{"one tunnel change → applied, p99", func(f fleetFigures) float64 { return f.changeP99().Seconds() }, ms},
		{"a new domain → applied by all", func(f fleetFigures) float64 { return f.DomainAll.Seconds() }, secs},
		{"frps restarted → all online", func(f fleetFigures) float64 { return f.Restart.Seconds() }, secs},
		{"GET /api/machines: a page of 100", func(f fleetFigures) float64 { return f.Page.Seconds() }, ms},
		{"GET /api/machines: a search", func(f fleetFigures) float64 { return f.Search.Seconds() }, ms},
		{"GET /api/machines: every row", func(f fleetFigures) float64 { return f.List.Seconds() }, ms},
	}
	for _, l := range lines {
		if !onPostgres && strings.HasPrefix(l.name, "PostgreSQL") {
			continue
		}
		fmt.Fprintf(&b, "| %s |", l.name)
		for _, f := range fs {
			fmt.Fprintf(&b, " %s |", l.unit(l.val(f)))
		}
		first, lastv := l.val(fs[0]), l.val(fs[len(fs)-1])
		if first > 0 {
			fmt.Fprintf(&b, " ×%.1f |\n", lastv/first)
		} else {
			b.WriteString(" — |\n")
		}
	}
	return b.String()
}

// fleets is "1 fleet" or "n fleets".
func fleets(n int) string {
	if n == 1 {
		return "1 fleet"
	}
	return fmt.Sprintf("%d fleets", n)
}

// edgeRSS is the edge's memory: the daemon's and frps's.
func (r fleetFigures) edgeRSS() int64 { return r.DaemonRSS + r.FRPSRSS }

// changeP99 is the 99th percentile of the single changes (sorted).
func (r fleetFigures) changeP99() time.Duration { return r.Change[len(r.Change)*99/100] }

// String is one fleet's figures, as BENCH.md gives them.
func (r fleetFigures) String() string {
	edge := r.edgeRSS()
	of := ""
	if r.Runs > 1 {
		of = fmt.Sprintf(" (median of %d fleets)", r.Runs)
	}
	return fmt.Sprintf("**%d machines**%s: joined in %s, all online and applied %s later; edge %.0f MB (daemon %.0f + frps %.0f; %.1f KB a machine), "+
		"%.1f %% of a CPU at steady state (daemon %.1f + frps %.1f); one tunnel change applied: median %s, p99 %s (%d changes); "+
		"a new domain and server host applied by all in %s (%s); frps restarted: all online again in %s, %d logins refused, the daemon's RSS at most %.0f MB; "+
		"GET /api/machines: a page of 100 %s, a search for one machine %s, every row (%d) %s",
		r.N, of, r.Join.Round(100*time.Millisecond), r.Settle.Round(100*time.Millisecond), mb(edge), mb(r.DaemonRSS), mb(r.FRPSRSS), float64(edge)/1024/float64(r.N),
		100*(r.DaemonCPU+r.FRPSCPU), 100*r.DaemonCPU, 100*r.FRPSCPU, median(r.Change).Round(time.Millisecond), r.changeP99().Round(time.Millisecond), len(r.Change),
		r.DomainAll.Round(100*time.Millisecond), strings.Join(r.DomainCurve, ", "), r.Restart.Round(100*time.Millisecond), r.RateRefused, mb(r.RestartPeakDaemonRSS),
		r.Page.Round(100*time.Microsecond), r.Search.Round(100*time.Microsecond), r.N, r.List.Round(100*time.Microsecond))
}

// raiseFileLimit lets this process and the edge it starts hold a large
// fleet's connections and ports: frps holds a listener for each of a
// machine's three ports and a connection for each machine, 40,000 files
// at 10,000 machines (a VPS's systemd gives its services 524,288).
func raiseFileLimit() {
	want := syscall.Rlimit{Cur: 1 << 19, Max: 1 << 19}
	var cur syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &cur); err == nil && cur.Max >= want.Max {
		want.Max = cur.Max
	}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) != nil {
		// Not root: as far as the hard limit goes.
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &cur)
		cur.Cur = cur.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &cur)
	}
}

// fleetLimit is the open files a process may hold here, and the largest
// fleet that lets one frps serve: its control connection, the listeners
// of its two TCP ports and a work connection a machine, and a margin.
func fleetLimit() (files uint64, machines int) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, 0
	}
	return l.Cur, int((l.Cur - min(l.Cur, 1000)) / 4)
}

// fleetName is the name of the fleet's i-th machine (from 0), in id order.
func fleetName(i int) string { return fmt.Sprintf("m%05d", i+1) }
