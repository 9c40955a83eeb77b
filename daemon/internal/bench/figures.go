package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

// Row is one line of BENCH.md.
type Row struct {
	Figure   string
	Goal     string
	Measured string
	// Value is the number held against the goal: a ratio to the same-run
	// baseline where there is one, else the measured figure itself.
	Value    float64
	Baseline string
	Met      bool
	Command  string
	// Means is one sentence on what the figure means for an operator's
	// VPS, or empty.
	Means string
	// Detail is a section of its own after the table (markdown), or empty.
	Detail string
}

// Options size a run.
type Options struct {
	Bins Bins
	// Dir is a scratch directory, removed by the caller.
	Dir string
	// Duration is how long each load phase lasts.
	Duration time.Duration
	// Machines and Tunnels size the memory figure (1,000 and 10,000 in
	// `make bench`; a few in the smoke test).
	Machines, Tunnels int
	// Registrations is how many machines register in the registration figure.
	Registrations int
	// Log receives progress lines.
	Log func(format string, args ...any)
	// Settle scales the waits that let a daemon settle before a reading
	// (10 s after a login, 5 s after loading it): 1 when zero, as in `make
	// bench`; the smoke test, which checks that every figure yields a row,
	// not the figures themselves, sets a tenth.
	Settle float64
	// OpenLoopRates are the constant rates the open-loop figures try, in
	// order, for each path (nil: openLoopRates, as in `make bench`). The
	// smoke test tries the first few: that each path yields a crossing
	// is its business, not how high.
	OpenLoopRates []int

	// FleetSizes are the fleets the fleet figure measures (FleetSizes
	// when nil; the smoke test runs one of 200).
	FleetSizes []int
	// FleetRuns is how many fleets of each size are measured, each figure
	// the median of them (1 when 0).
	FleetRuns int
	// fleetOnPostgres: the fleet's daemon runs on PostgreSQL (PostgresFleet).
	fleetOnPostgres bool

	// pg is the PostgreSQL of the PostgreSQL figures; Run sets it.
	pg *pgServer
}

// settle sleeps d, scaled by o.Settle.
func (o Options) settle(d time.Duration) {
	if o.Settle > 0 {
		d = time.Duration(float64(d) * o.Settle)
	}
	time.Sleep(d)
}

func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		o.Log(format, args...)
	}
}

// World is one daemon with its tunnel server, a machine whose frpc carries
// a tcp tunnel, an HTTP tunnel and an iperf3 tunnel, and Caddy in front.
type World struct {
	opts      Options
	agent     *http.Server // the machine's agent
	wire      string       // frp's wire protocol frpc's config asks for
	Daemon    *Daemon
	FRPS      *Proc
	FRPC      *Proc
	Caddy     *Proc
	Iperf     *Proc
	MachineID int64

	OriginPort int // the machine's web app
	IperfPort  int // the machine's iperf3 server

	// The relay pairs (relay.go) in front of the web app and the iperf3
	// server: the reference of the tunnel figures.
	RelayHTTP, RelayIperf RelayPair

	HTTPTunnel   Tunnel
	IperfTunnel  Tunnel
	UDPTunnel    Tunnel // to udp, the machine's UDP service (udp.go)
	udp          *udpSink
	CaddyPort    int
	caddyfile    string
	caddyCPUs    string // the CPU list Caddy was started on ("": all)
	Baseline     *Proc  // the bare handler, in a process of its own (see ServeBaseline)
	BaselineAddr string
	origin       *http.Server
	cuts         int // silent cuts so far (each makes its own machine and namespace)

	peers     *Peers   // OpenSSH and frp's own vhost (peers.go)
	cpus      cpuSplit // the pinned figures' CPU sets (pin.go)
	pinnedNow bool
}

const (
	domain     = "bench.test"
	tunnelHost = "app." + domain
	directHost = "direct." + domain
	relayHost  = "relay." + domain
)

// body is what both the origin and the bare baseline handler answer: the
// size of a small JSON API answer.
var body = []byte(`{"data":[{"id":1,"name":"nas-1","status":"online","tunnel_port":20000}]}`)

func serve(addr string, h http.Handler) (*http.Server, string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go s.Serve(l)
	return s, l.Addr().String(), nil
}

// baselineEnv, set to a loopback address, makes the bench's own binary
// serve the bare baseline handler there instead of measuring (ServeBaseline).
const baselineEnv = "TUNNELSVC_BENCH_BASELINE"

// ServeBaseline serves the bare net/http JSON handler and never returns
// when the environment asks for it (baselineEnv); otherwise it returns at
// once. The bench's main and TestMain call it first. It serves a relay of
// the relay pair (startRelayPair) instead when the environment asks for one.
//
// The baseline runs in a process of its own, like the daemon it is compared
// with. Served inside the bench's process, next to the load generator, a
// request to it never left the process: the Go scheduler handed it from the
// client's goroutine to the server's, while every request to the daemon
// woke another process. On 2 busy cores that wake-up alone cost a bare
// handler 85–125 µs median instead of 33 µs, which the figures blamed on
// the daemon.
func ServeBaseline() {
	if spec := os.Getenv(relayEnv); spec != "" {
		serveRelay(spec)
	}
	addr := os.Getenv(baselineEnv)
	if addr == "" {
		return
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "baseline:", err)
		os.Exit(1)
	}
	h := jsonHandler()
	if f := os.Getenv(baselineBodyEnv); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "baseline:", err)
			os.Exit(1)
		}
		h = bodyHandler(b)
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintln(os.Stderr, "baseline:", s.Serve(l))
	os.Exit(1)
}

// baselineBodyEnv, set to a file, makes the baseline answer that file's
// bytes instead of body.
const baselineBodyEnv = "TUNNELSVC_BENCH_BASELINE_BODY"

// startBaseline runs this binary again as the baseline server; env may
// add baselineBodyEnv.
func startBaseline(env ...string) (*Proc, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	port, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := StartProcEnv("baseline", append([]string{baselineEnv + "=" + addr}, env...), exe)
	if err != nil {
		return nil, "", err
	}
	if err := waitTCP(addr, 10*time.Second, p); err != nil {
		p.Kill(syscall.SIGTERM)
		return nil, "", err
	}
	return p, addr, nil
}

func jsonHandler() http.Handler { return bodyHandler(body) }

// bodyHandler answers b as JSON to every request.
func bodyHandler(b []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
}

// NewWorld starts everything the throughput figures need.
func NewWorld(ctx context.Context, o Options) (*World, error) {
	w := &World{opts: o}
	ok := false
	defer func() {
		if !ok {
			w.Close()
		}
	}()
	var err error
	if w.Daemon, err = StartDaemon(o.Bins, filepath.Join(o.Dir, "world")); err != nil {
		return nil, err
	}
	d := w.Daemon
	if err := d.Setup(); err != nil {
		return nil, err
	}
	if err := d.Call(d.Client, "POST", "/api/local/skip", map[string]string{"domain": domain}, nil); err != nil {
		return nil, err
	}
	if w.FRPS, err = StartFRPS(o.Bins, d); err != nil {
		return nil, err
	}
	// The machine's services: a web app and an iperf3 server.
	var originAddr string
	if w.origin, originAddr, err = serve("127.0.0.1:0", jsonHandler()); err != nil {
		return nil, err
	}
	w.OriginPort, _ = strconv.Atoi(originAddr[strings.LastIndex(originAddr, ":")+1:])
	if w.Baseline, w.BaselineAddr, err = startBaseline(); err != nil {
		return nil, err
	}
	if w.IperfPort, err = FreePort(); err != nil {
		return nil, err
	}
	if w.Iperf, err = StartProc("iperf3 -s", "iperf3", "-s", "-B", "127.0.0.1", "-p", strconv.Itoa(w.IperfPort)); err != nil {
		return nil, fmt.Errorf("iperf3 (scripts/install-deps.sh installs it): %w", err)
	}
	if err := waitTCP(fmt.Sprintf("127.0.0.1:%d", w.IperfPort), 10*time.Second, w.Iperf); err != nil {
		return nil, err
	}

	if w.RelayHTTP, err = startRelayPair(o.Bins, "web", fmt.Sprintf("127.0.0.1:%d", w.OriginPort)); err != nil {
		return nil, err
	}
	if w.RelayIperf, err = startRelayPair(o.Bins, "iperf3", fmt.Sprintf("127.0.0.1:%d", w.IperfPort)); err != nil {
		return nil, err
	}
	w.peers = &Peers{}
	if err := startSSHPeer(w.peers, o.Dir, w.OriginPort); err != nil {
		return nil, err
	}
	if err := startVhostPeer(w.peers, o.Bins, o.Dir, w.OriginPort); err != nil {
		return nil, err
	}

	tok, err := d.NewToken()
	if err != nil {
		return nil, err
	}
	reg, err := d.Register(tok, "bench-1")
	if err != nil {
		return nil, err
	}
	if w.MachineID, err = d.MachineID("bench-1"); err != nil {
		return nil, err
	}
	// The machine's agent: the real one's handler, on a machine whose
	// tunnel client is bin/frpc (it tells the daemon its version).
	if w.agent, err = startAgent(reg, w.opts.Bins.FRPC); err != nil {
		return nil, err
	}
	if w.HTTPTunnel, err = d.AddTunnel(w.MachineID, "web", "http", w.OriginPort, "app"); err != nil {
		return nil, err
	}
	if w.IperfTunnel, err = d.AddTunnel(w.MachineID, "iperf", "tcp", w.IperfPort, ""); err != nil {
		return nil, err
	}
	if w.udp, err = startUDPSink(); err != nil {
		return nil, err
	}
	if w.UDPTunnel, err = d.AddTunnel(w.MachineID, "udp", "udp", w.udp.port(), ""); err != nil {
		return nil, err
	}
	if err := w.StartClient(); err != nil {
		return nil, err
	}
	// The daemon reads the agent's status through the machine's agent
	// tunnel: it learns frpc's version, and the config it then gives asks
	// for what that frpc speaks (frp's wire protocol v2). frpc restarts
	// on it, as the agent would have it.
	if err := d.Call(d.Client, "GET", fmt.Sprintf("/api/machines/%d/agent/status", w.MachineID), nil, nil); err != nil {
		return nil, fmt.Errorf("the machine's agent status: %w", err)
	}
	w.FRPC.Kill(syscall.SIGTERM)
	if err := w.StartClient(); err != nil {
		return nil, err
	}

	// Caddy, from the daemon's own renderer, serving the tunnel and, as a
	// site of the same shape, the same origin directly (the baseline).
	if w.CaddyPort, err = FreePort(); err != nil {
		return nil, err
	}
	file, err := webproxy.Render(webproxy.Input{
		Domain: domain, Dashboard: d.Listen,
		Tunnels: []webproxy.HTTPTunnel{
			{Subdomain: "app", Port: w.HTTPTunnel.RemotePort},
			{Subdomain: "direct", Port: w.OriginPort},
			{Subdomain: "relay", Port: w.RelayHTTP.Port},
			{Subdomain: "ssh", Port: w.peers.SSHPort},
		},
		PlainHTTPPort: w.CaddyPort, Admin: "off",
	})
	if err != nil {
		return nil, err
	}
	w.caddyfile = filepath.Join(o.Dir, "Caddyfile")
	if err := os.WriteFile(w.caddyfile, file, 0o644); err != nil {
		return nil, err
	}
	if err := w.startCaddy(""); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 20*time.Second, "GET "+vhostHost+" through frp's vhost", func() error {
		return w.getAt(w.peers.VhostPort, vhostHost)
	}); err != nil {
		return nil, fmt.Errorf("%w: %s %s", err, w.peers.VhostFRPS.Out.String(), w.peers.VhostFRPC.Out.String())
	}
	ok = true
	return w, nil
}

// startCaddy (re)starts Caddy on the CPUs of cpus (taskset's list; ""
// for all of them) and waits until every site answers. Caddy's Go runtime
// sizes itself to the CPUs it may use when it starts, and Debian's Caddy
// (Go 1.19) never looks again: pinned to one CPU after it started, it kept
// two schedulers' threads there and spent about 18 % more per request than
// on a 1-vCPU VPS, where it starts with one.
func (w *World) startCaddy(cpus string) error {
	if w.Caddy != nil {
		w.Caddy.Kill(syscall.SIGTERM)
	}
	bin, args := w.opts.Bins.Caddy, []string{"run", "--config", w.caddyfile, "--adapter", "caddyfile"}
	if cpus != "" {
		// taskset execs Caddy in its own process: the PID is Caddy's.
		bin, args = "taskset", append([]string{"-c", cpus, bin}, args...)
	}
	var err error
	w.Caddy, err = StartProcEnv("caddy", []string{"XDG_DATA_HOME=" + w.opts.Dir, "XDG_CONFIG_HOME=" + w.opts.Dir}, bin, args...)
	if err != nil {
		return err
	}
	w.caddyCPUs = cpus
	if err := waitTCP(fmt.Sprintf("127.0.0.1:%d", w.CaddyPort), 15*time.Second, w.Caddy); err != nil {
		return err
	}
	for _, host := range []string{tunnelHost, directHost, relayHost, sshHost} {
		if err := waitFor(context.Background(), 20*time.Second, "GET "+host+" through caddy", func() error { return w.get(host) }); err != nil {
			return fmt.Errorf("%w: %s", err, w.Caddy.Out.String())
		}
	}
	return nil
}

// StartClient (re)starts the machine's frpc with its current config and
// waits until the HTTP tunnel carries a request.
func (w *World) StartClient() error {
	conf, err := w.Daemon.ClientConfig(w.MachineID)
	if err != nil {
		return err
	}
	w.wire = "v1"
	if strings.Contains(conf, "wireProtocol = 'v2'") {
		w.wire = "v2"
	}
	if w.FRPC, err = StartFRPC(w.opts.Bins, w.opts.Dir, "bench-1", conf); err != nil {
		return err
	}
	return waitFor(context.Background(), 20*time.Second, "the http tunnel's port", func() error {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", w.HTTPTunnel.RemotePort))
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
}

func (w *World) get(host string) error { return w.getAt(w.CaddyPort, host) }

// getAt checks that GET / for host at port answers the origin's body.
func (w *World) getAt(port int, host string) error { return getHost(port, host) }

// getHost checks that GET / for host at port answers the origin's body.
func getHost(port int, host string) error {
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/", port), nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != string(body) {
		return fmt.Errorf("%s: %d %q", host, resp.StatusCode, b)
	}
	return nil
}

// Close stops everything the world started.
func (w *World) Close() {
	procs := []*Proc{w.Caddy, w.FRPC, w.FRPS, w.Iperf, w.Baseline}
	for _, p := range append(append(procs, w.RelayHTTP.Procs...), w.RelayIperf.Procs...) {
		p.Kill(syscall.SIGTERM)
	}
	w.peers.close()
	if w.agent != nil {
		w.agent.Close()
	}
	if w.Daemon != nil && w.Daemon.Proc != nil {
		w.Daemon.Stop()
	}
	if w.origin != nil {
		w.origin.Close()
	}
	if w.udp != nil {
		w.udp.conn.Close()
	}
}

// load is one load run's outcome: a vegeta attack's (closed loop) or
// openLoad's (open loop).
type load struct {
	Rate     float64 // successful requests per second
	Success  float64
	Requests uint64
	P99      time.Duration
	Mean     time.Duration
	Errors   []string
}

// openConns bounds an open-loop run's connections. Unbounded, every
// request past the busy ones opened a connection; their TIME_WAITs used up
// this machine's ephemeral ports within seconds of an overload, and the
// generator's own "bind: address already in use" was counted as the
// tunnel's errors. Requests waiting for a connection count in latency.
const openConns = 1000

// attack runs GET url with header for d, closed loop: `workers`
// concurrent requests.
func attack(url string, header http.Header, workers uint64, d time.Duration) load {
	tgt := vegeta.NewStaticTargeter(vegeta.Target{Method: "GET", URL: url, Header: header})
	a := vegeta.NewAttacker(vegeta.KeepAlive(true), vegeta.Timeout(10*time.Second), vegeta.Connections(int(workers)*2),
		vegeta.Workers(workers), vegeta.MaxWorkers(workers))
	var m vegeta.Metrics
	for res := range a.Attack(tgt, vegeta.Rate{Freq: 0, Per: time.Second}, d, "bench") {
		m.Add(res)
	}
	m.Close()
	return load{Rate: m.Throughput, Success: m.Success, Requests: m.Requests, P99: m.Latencies.P99, Mean: m.Latencies.Mean, Errors: m.Errors}
}

// alternate runs each of fs in turns of one second until each has run for
// d, so that what else runs on the machine weighs on the figure and its
// baselines alike. Rates are averaged over the turns; p99 and mean are the
// worst turn's.
func alternate(d time.Duration, fs ...func(time.Duration) load) []load {
	turns := int(d / time.Second)
	if turns < 1 {
		turns = 1
	}
	slice := d / time.Duration(turns)
	ls := make([][]load, len(fs))
	for i := 0; i < turns; i++ {
		for j, f := range fs {
			ls[j] = append(ls[j], f(slice))
		}
	}
	out := make([]load, len(fs))
	for j := range fs {
		out[j] = merge(ls[j])
	}
	return out
}

func merge(ls []load) load {
	var out load
	var ok float64
	for _, l := range ls {
		out.Rate += l.Rate / float64(len(ls))
		out.Requests += l.Requests
		ok += l.Success * float64(l.Requests)
		out.P99 = max(out.P99, l.P99)
		out.Mean = max(out.Mean, l.Mean)
		out.Errors = append(out.Errors, l.Errors...)
	}
	if out.Requests > 0 {
		out.Success = ok / float64(out.Requests)
	}
	return out
}

// errorsOf names what failed in l, if anything: its first two errors.
func errorsOf(l load) string {
	if len(l.Errors) == 0 {
		return ""
	}
	return " (" + strings.Join(l.Errors[:min(2, len(l.Errors))], "; ") + ")"
}

func hostHeader(host string) http.Header {
	return http.Header{"Host": []string{host}}
}

// APIThroughput: authenticated GET /api/machines against a bare net/http
// handler, in a process of its own, answering the very same bytes; wrk
// with 2 threads and 32 connections, in turns of a second. wrk spends a
// fraction of what the daemon spends per request, so the ratio is the
// daemon's (the in-process vegeta generator spent more than the daemon
// and flattered it: 0.69 where wrk reads 0.48).
func (w *World) APIThroughput() Row {
	row := Row{
		Figure:   "authenticated `GET /api/machines` / a bare net/http handler answering the same bytes (wrk, 2 threads, 32 connections)",
		Goal:     "≥ 0.5",
		Baseline: "bare net/http handler in a process of its own, same body, same run",
	}
	fail := func(err error) Row { row.Measured = "error: " + err.Error(); return row }
	req, _ := http.NewRequest("GET", w.Daemon.Base+"/api/machines", nil)
	req.Header.Set("Cookie", w.Daemon.SessionCookie())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fail(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		return fail(fmt.Errorf("GET /api/machines: %d %v", resp.StatusCode, err))
	}
	f := filepath.Join(w.opts.Dir, "api-body.json")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		return fail(err)
	}
	bare, addr, err := startBaseline(baselineBodyEnv + "=" + f)
	if err != nil {
		return fail(err)
	}
	defer bare.Kill(syscall.SIGTERM)
	paths := []vpsPath{
		{"API", w.Daemon.Base + "/api/machines", []string{"Cookie: " + w.Daemon.SessionCookie()}, []vpsProc{{"daemon", w.Daemon.CPU}}},
		{"bare", "http://" + addr + "/", nil, []vpsProc{{"handler", bare.CPU}}},
	}
	ls, err := w.measurePaths(paths, 2, 32)
	if err != nil {
		return fail(err)
	}
	api, bareL := ls[0], ls[1]
	row.Value = ratio(api.rate, bareL.rate)
	row.Measured = fmt.Sprintf("%.0f / %.0f req/s (%d-byte answers, %d failed); CPU per request: daemon %.1f µs, bare handler %.1f µs",
		api.rate, bareL.rate, len(b), api.failed, api.perReq(), bareL.perReq())
	row.Met = row.Value >= 0.5 && api.failed == 0
	row.Means = fmt.Sprintf("The dashboard's API: one CPU answers about %.0f authenticated requests a second (%.0f µs each).", 1e6/max(api.perReq(), 1), api.perReq())
	return row
}

// relayPair names the reference in the measured column (see relay.go).
const relayPair = "two bare TLS relays"

// TCPThroughput: iperf3 through frps/frpc (TLS on, the daemon's configs)
// against iperf3 straight to the machine's port on loopback, and through
// the relay pair.
func (w *World) TCPThroughput() Row {
	secs := int(w.opts.Duration.Seconds())
	if secs < 1 {
		secs = 1
	}
	// In turns of a second, like alternate: through the tunnel, directly,
	// through the relays.
	ports := []int{w.IperfTunnel.RemotePort, w.IperfPort, w.RelayIperf.Port}
	// The VPS side's processes on each path (none directly), and the
	// processor time they spent, as for the HTTP figures; when pinned,
	// also how busy each CPU set was in the tunnel's turns.
	vps := [3][]*Proc{{w.FRPS, w.Daemon.Proc}, nil, {w.RelayIperf.Procs[1]}}
	var bps [3]float64
	var spent [3]time.Duration
	var vpsBusy, restBusy, wall time.Duration
	var err error
	for i := 0; i < secs && err == nil; i++ {
		for j, port := range ports {
			var b float64
			c0 := cpuOf(vps[j]...)
			busy := j == 0 && w.pinnedNow
			var v0, r0 time.Duration
			if busy {
				v0, r0 = setBusy(w.cpus.VPS), setBusy(w.cpus.Rest)
			}
			t0 := time.Now()
			if b, err = iperf(port, 1); err != nil {
				break
			}
			spent[j] += cpuOf(vps[j]...) - c0
			if busy {
				vpsBusy += setBusy(w.cpus.VPS) - v0
				restBusy += setBusy(w.cpus.Rest) - r0
				wall += time.Since(t0)
			}
			bps[j] += b / float64(secs)
		}
	}
	through, direct, relay := bps[0], bps[1], bps[2]
	row := Row{
		Figure:   "TCP through frps/frpc, TLS on / direct loopback (iperf3)",
		Goal:     "≥ 0.25",
		Baseline: "iperf3 to the same server directly, same run",
	}
	if err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	// Seconds of VPS CPU per gigabyte carried (iperf3's rate over the
	// turns, each of about a second).
	perGB := func(j int) float64 {
		gb := bps[j] / 8 / 1e9 * float64(secs)
		if gb == 0 {
			return 0
		}
		return spent[j].Seconds() / gb
	}
	row.Measured = fmt.Sprintf("%.2f / %.2f Gbit/s; %s %.2f Gbit/s (%.3f); VPS CPU per GB carried: frps and the daemon %.2f s, the relay %.2f s",
		through/1e9, direct/1e9, relayPair, relay/1e9, ratio(relay, direct), perGB(0), perGB(2))
	if wall > 0 {
		row.Measured += fmt.Sprintf("; in the tunnel's turns the VPS's CPU was %.0f%% busy, the machine side's %.0f%%",
			100*float64(vpsBusy)/float64(wall), 100*float64(restBusy)/float64(wall)/float64(max(1, w.cpus.Rest.Count())))
	}
	row.Value = ratio(through, direct)
	row.Met = row.Value >= 0.25
	return row
}

// iperfBusyFor bounds the wait for iperf3's server to finish its last
// test: it serves one at a time, and the end of one test (through the
// tunnel, the relays or directly) can reach it after the next client
// asks, which it refuses with "the server is busy running a test".
const iperfBusyFor = 5 * time.Second

func iperf(port, secs int) (float64, error) {
	deadline := time.Now().Add(iperfBusyFor)
	for {
		bps, busy, err := iperfOnce(port, secs)
		if !busy || time.Now().After(deadline) {
			return bps, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// iperfOnce runs one iperf3 client; busy reports the server's refusal
// because it still runs a test.
func iperfOnce(port, secs int) (bps float64, busy bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs+30)*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "iperf3", "-c", "127.0.0.1", "-p", strconv.Itoa(port), "-t", strconv.Itoa(secs), "-J").Output()
	var r struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	json.Unmarshal(out, &r)
	if r.Error != "" {
		return 0, strings.Contains(r.Error, "server is busy"), fmt.Errorf("iperf3: %s", r.Error)
	}
	if err != nil {
		return 0, false, fmt.Errorf("iperf3: %v", err)
	}
	return r.End.SumReceived.BitsPerSecond, false, nil
}

// HTTPClosedLoop: Caddy → frps → frpc → origin against Caddy → the same
// origin, 50 concurrent requests each.
func (w *World) HTTPClosedLoop() Row {
	d := w.opts.Duration
	url := fmt.Sprintf("http://127.0.0.1:%d/", w.CaddyPort)
	tunnel := []*Proc{w.FRPS, w.FRPC, w.Daemon.Proc}
	// Processor time per phase: the engines' during the tunnel's turns,
	// the relays' during theirs, and the whole machine's in each (busy
	// time from /proc/stat), which says what a request costs end to end.
	type spent struct{ procs, machine time.Duration }
	var tunnelCPU, directCPU, relayCPU spent
	phase := func(host string, procs []*Proc, s *spent) func(time.Duration) load {
		return func(d time.Duration) load {
			c0, m0 := cpuOf(procs...), machineCPU()
			l := attack(url, hostHeader(host), 50, d)
			s.procs += cpuOf(procs...) - c0
			s.machine += machineCPU() - m0
			return l
		}
	}
	ls := alternate(d,
		phase(tunnelHost, tunnel, &tunnelCPU),
		phase(directHost, nil, &directCPU),
		phase(relayHost, w.RelayHTTP.Procs, &relayCPU))
	through, direct, relay := ls[0], ls[1], ls[2]
	v := ratio(through.Rate, direct.Rate)
	return Row{
		Figure: "unpinned: HTTP through Caddy → frps → frpc → origin / Caddy → origin (vegeta in the bench, closed loop, 50 concurrent)",
		Goal:   "≥ 0.8",
		Measured: fmt.Sprintf("%.0f / %.0f req/s (success %.1f%% / %.1f%%); frps+frpc+daemon CPU %s per request; "+
			"machine CPU per request %s / %s; %s %.0f req/s (%.3f), relays' CPU %s and machine's %s per request",
			through.Rate, direct.Rate, through.Success*100, direct.Success*100, perRequest(tunnelCPU.procs, through.Requests),
			perRequest(tunnelCPU.machine, through.Requests), perRequest(directCPU.machine, direct.Requests),
			relayPair, relay.Rate, ratio(relay.Rate, direct.Rate), perRequest(relayCPU.procs, relay.Requests), perRequest(relayCPU.machine, relay.Requests)),
		Baseline: "Caddy straight to the origin, same run",
		Value:    v,
		Met:      v >= 0.8 && through.Success == 1,
	}
}

const openLoopNone = "Caddy alone held none of the rates tried"

// openLoopRates are the constant rates the open-loop figure tries, in
// order, for each path.
var openLoopRates = []int{250, 500, 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 10000, 12000}

// holdsOpenLoop: every request answered, p99 under 20 ms.
func holdsOpenLoop(l load) bool { return l.Success == 1 && l.P99 < 20*time.Millisecond }

// rates are the open-loop figures' rates (Options.OpenLoopRates).
func (o Options) rates() []int {
	if o.OpenLoopRates != nil {
		return o.OpenLoopRates
	}
	return openLoopRates
}

// highestHeld is the highest of the rates the path to host holds, and
// the first it does not (0: it held them all).
func (w *World) highestHeld(url, host string, d time.Duration) (held, crossed int) {
	for _, rate := range w.opts.rates() {
		if !holdsOpenLoop(openLoad(url, hostHeader(host), rate, d)) {
			return held, rate
		}
		held = rate
	}
	return held, 0
}

// HTTPOpenLoop: the highest rate Caddy alone holds with no errors and p99
// under 20 ms, the same for the relays and the tunnel, then the tunnel at
// half of Caddy's rate.
func (w *World) HTTPOpenLoop() Row {
	d := w.opts.Duration
	url := fmt.Sprintf("http://127.0.0.1:%d/", w.CaddyPort)
	row := Row{
		Figure:   "HTTP through the tunnel at a constant rate (open loop)",
		Goal:     "p99 < 20 ms (0 errors) at 0.5 × the highest rate Caddy alone holds; the rate where p99 crosses 20 ms is reported for Caddy alone, the relays and the tunnel",
		Baseline: "highest rate Caddy → origin holds, same run; value: p99 in ms at 0.5 of it",
	}
	// Where each path's p99 crosses 20 ms, Caddy alone's with its VPS CPU
	// per request at the highest rate it held.
	best := 0
	var aloneCPU string
	for _, rate := range w.opts.rates() {
		c0 := w.Caddy.CPU()
		l := openLoad(url, hostHeader(directHost), rate, d)
		if !holdsOpenLoop(l) {
			break
		}
		best, aloneCPU = rate, perRequest(w.Caddy.CPU()-c0, l.Requests)
	}
	if best == 0 {
		row.Measured = openLoopNone
		return row
	}
	relayHeld, relayCrossed := w.highestHeld(url, relayHost, d)
	tunnelHeld, tunnelCrossed := w.highestHeld(url, tunnelHost, d)
	crossing := func(held, crossed int) string {
		if crossed == 0 {
			return fmt.Sprintf("holds every rate tried, up to %d", held)
		}
		return fmt.Sprintf("holds %d, crosses 20 ms by %d", held, crossed)
	}
	// The tunnel at half of Caddy's rate, with the VPS CPU it costs.
	tunnel := []*Proc{w.Caddy, w.FRPS, w.Daemon.Proc}
	c0 := make([]time.Duration, len(tunnel))
	for i, p := range tunnel {
		c0[i] = p.CPU()
	}
	self0 := selfCPU()
	half := best / 2
	at := openLoad(url, hostHeader(tunnelHost), half, d)
	selfPer := perRequest(selfCPU()-self0, at.Requests)
	var atTotal time.Duration
	var shares []string
	for i, p := range tunnel {
		c := p.CPU() - c0[i]
		atTotal += c
		shares = append(shares, []string{"Caddy", "frps", "daemon"}[i]+" "+perRequest(c, at.Requests))
	}
	atCPU := perRequest(atTotal, at.Requests) + " (" + strings.Join(shares, " + ") + ")"
	row.Measured = fmt.Sprintf("Caddy alone holds %d req/s (VPS CPU %s per request); tunnel at %d: success %.2f%%, p99 %s%s, VPS CPU %s per request, the load generator's %s; "+
		"where p99 crosses 20 ms: Caddy alone %s, %s %s, the tunnel %s",
		best, aloneCPU, half, at.Success*100, at.P99.Round(10*time.Microsecond), errorsOf(at), atCPU, selfPer,
		crossing(best, nextRate(w.opts.rates(), best)), relayPair, crossing(relayHeld, relayCrossed), crossing(tunnelHeld, tunnelCrossed))
	// The value is what the goal bounds: the p99 at 0.5 of Caddy's rate,
	// in milliseconds, so that the median of several runs is the median
	// p99 (success is 1 in nearly every run and would pick any of them).
	row.Value = float64(at.P99) / float64(time.Millisecond)
	row.Met = holdsOpenLoop(at)
	return row
}

// nextRate is the rate of rates tried after r (0 after the last).
func nextRate(rates []int, r int) int {
	for i, x := range rates {
		if x == r && i+1 < len(rates) {
			return rates[i+1]
		}
	}
	return 0
}

// Disconnect: frpc killed to the machine shown offline.
func (w *World) Disconnect(ctx context.Context) Row {
	row := Row{Figure: "frpc killed → machine `offline`", Goal: "< 2 s", Baseline: "none (absolute)"}
	if err := waitFor(ctx, 20*time.Second, "machine online", func() error { return w.status("online") }); err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	t0 := time.Now()
	w.FRPC.Kill(syscall.SIGKILL)
	err := waitFor(ctx, 90*time.Second, "machine offline", func() error { return w.status("offline") })
	took := time.Since(t0)
	if err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	row.Measured = took.Round(10 * time.Millisecond).String()
	row.Value = took.Seconds()
	row.Met = took < 2*time.Second
	// Bring the machine back for whatever runs next.
	if err := w.StartClient(); err != nil {
		row.Measured += " (frpc did not come back: " + err.Error() + ")"
	}
	return row
}

func (w *World) status(want string) error { return w.statusOf(w.MachineID, want) }

func (w *World) statusOf(id int64, want string) error {
	var ms []Machine
	if err := w.Daemon.Call(w.Daemon.Client, "GET", "/api/machines", nil, &ms); err != nil {
		return err
	}
	for _, m := range ms {
		if m.ID == id {
			if m.Status == want {
				return nil
			}
			return fmt.Errorf("status %s", m.Status)
		}
	}
	return fmt.Errorf("machine %d gone", id)
}

// ColdStart: systemd-socket-activate holds the port; the time from the
// first connection to the answer of /healthz, median of runs.
func ColdStart(o Options, runs int) Row {
	row := Row{Figure: "cold start through socket activation (connect → `/healthz` answered)", Goal: "< 100 ms", Baseline: "none (absolute)"}
	activate, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		row.Measured = "error: systemd-socket-activate is missing (package systemd)"
		return row
	}
	dataDir := filepath.Join(o.Dir, "cold")
	var times []time.Duration
	for i := 0; i <= runs; i++ {
		port, _ := FreePort()
		plugin, _ := FreePort()
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		p, err := StartProc("socket-activate", activate, "-l", addr, "--",
			o.Bins.Tunnelsvc, "serve", "--data-dir", dataDir, "--system-root", filepath.Join(o.Dir, "cold-root"),
			"--frps-plugin-listen", fmt.Sprintf("127.0.0.1:%d", plugin), "--gate-listen", "127.0.0.1:0", "--bin-dir", filepath.Dir(o.Bins.FRPS), "--log-level", "warn")
		if err != nil {
			row.Measured = "error: " + err.Error()
			return row
		}
		if err := waitTCP(addr, 10*time.Second, p); err != nil {
			p.Kill(syscall.SIGTERM)
			row.Measured = "error: " + err.Error()
			return row
		}
		c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		t0 := time.Now()
		resp, err := c.Get("http://" + addr + "/healthz")
		took := time.Since(t0)
		if err == nil {
			resp.Body.Close()
		}
		p.Kill(syscall.SIGTERM)
		if err != nil {
			row.Measured = "error: " + err.Error()
			return row
		}
		if i > 0 { // the first start creates and migrates the database
			times = append(times, took)
		}
	}
	m := median(times)
	row.Measured = fmt.Sprintf("median %s of %d", m.Round(time.Millisecond), len(times))
	row.Value = float64(m) / float64(time.Millisecond)
	row.Met = m < 100*time.Millisecond
	return row
}

// IdleRSS: the daemon's RSS idle before setup, and 10 s after a login.
// The daemon starts with its executable dropped from the page cache: a
// freshly linked file sits there in large folios, which this kernel maps
// whole on the first fault, so a warm start counts pages the daemon never
// used (about 5 MB more here). After a boot, and on kernels without large
// folios in the page cache, the daemon maps what it faults in.
func IdleRSS(o Options) Row {
	row := Row{Figure: "idle RSS before setup; 10 s after a login", Goal: "< 30 MB within 10 s of a login", Baseline: "none (absolute)"}
	dropCached(o.Bins.Tunnelsvc)
	d, err := StartDaemon(o.Bins, filepath.Join(o.Dir, "idle"))
	if err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	defer d.Stop()
	o.settle(2 * time.Second)
	before, _ := d.RSS()
	if err := d.Setup(); err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	if err := d.Login(); err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	peak, _ := d.RSS()
	o.settle(10 * time.Second)
	after, _ := d.RSS()
	anon, _ := d.RSSAnon()
	exe, _ := os.Stat(o.Bins.Tunnelsvc)
	var size int64
	if exe != nil {
		size = exe.Size()
	}
	row.Measured = fmt.Sprintf("%.1f MB before setup, %.1f MB right after the login, %.1f MB 10 s later: %.1f MB the daemon's own memory (RssAnon), "+
		"%.1f MB pages of its %.1f MB executable and libc that it faulted in (RssFile), started with the executable out of the page cache as after a boot",
		mb(before), mb(peak), mb(after), mb(anon), mb(after-anon), mb(size))
	row.Value = mb(after)
	row.Met = mb(after) < 30
	return row
}

// dropCached asks the kernel to drop file's pages from the page cache
// (posix_fadvise DONTNEED), so that a process started from it next faults
// in only the pages it uses, as the first start after a boot does.
func dropCached(file string) {
	f, err := os.Open(file)
	if err != nil {
		return
	}
	defer f.Close()
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// Registrations: POST /api/bootstrap with the real token claim and port
// allocation, 50 concurrent.
func Registrations(o Options) Row {
	row := Row{Figure: "bootstrap registrations, 50 concurrent", Goal: "≥ 200/s", Baseline: "none (absolute)"}
	b, err := registrationBurst(o, filepath.Join(o.Dir, "reg"), "")
	if err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	row.Measured = b.String()
	row.Value = b.Rate
	row.Met = b.Rate >= 200 && b.Failed == 0
	return row
}

// burst is the outcome of registrationBurst.
type burst struct {
	Rate     float64 // successful registrations per second
	N        int
	Took     time.Duration
	Failed   int64
	FirstErr any
}

func (b burst) String() string {
	s := fmt.Sprintf("%.0f/s (%d in %s, %d failed)", b.Rate, b.N, b.Took.Round(time.Millisecond), b.Failed)
	if b.Failed > 0 {
		s += fmt.Sprintf("; first: %v", b.FirstErr)
	}
	return s
}

// registrationBurst starts a daemon in dir on the database at url (SQLite
// when empty), creates o.Registrations bootstrap tokens, and has 50
// clients claim them at once, as bootstrap.sh does.
func registrationBurst(o Options, dir, url string) (burst, error) {
	d, err := StartDaemonDB(o.Bins, dir, 2*o.Registrations, url)
	if err != nil {
		return burst{}, err
	}
	defer d.Stop()
	if err := d.Setup(); err != nil {
		return burst{}, err
	}
	n := o.Registrations
	tokens := make(chan string, n)
	for i := 0; i < n; i++ {
		t, err := d.NewToken()
		if err != nil {
			return burst{}, err
		}
		tokens <- t
	}
	close(tokens)
	var failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	var seq atomic.Int64
	t0 := time.Now()
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tok := range tokens {
				if _, err := d.Register(tok, fmt.Sprintf("m-%d", seq.Add(1))); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(t0)
	return burst{
		Rate: float64(n-int(failed.Load())) / took.Seconds(), N: n, Took: took,
		Failed: failed.Load(), FirstErr: firstErr.Load(),
	}, nil
}

// LoadedRSS: the daemon's RSS with many machines and tunnels registered
// through the API.
func LoadedRSS(o Options) Row {
	row := Row{Figure: fmt.Sprintf("daemon RSS with %d machines and %d tunnels", o.Machines, o.Tunnels), Goal: "reported", Baseline: "idle RSS of the same daemon before they were added"}
	d, err := StartDaemonPorts(o.Bins, filepath.Join(o.Dir, "loaded"), 2*o.Machines+o.Tunnels)
	if err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	defer d.Stop()
	if err := d.Setup(); err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	o.settle(time.Second)
	idle, _ := d.RSS()
	if err := populate(d, o.Machines, o.Tunnels/o.Machines); err != nil {
		row.Measured = fmt.Sprintf("error: %v (daemon: %s)", err, lastError(d.Out.String()))
		return row
	}
	// Let the background pushes and the garbage collector settle.
	o.settle(5 * time.Second)
	loaded, _ := d.RSS()
	row.Measured = fmt.Sprintf("%.1f MB (idle %.1f MB)", mb(loaded), mb(idle))
	row.Value = mb(loaded)
	row.Met = true
	return row
}

// populate registers machines m-0 … m-<machines-1> through the API, each
// with perMachine tcp tunnels, 20 at a time; it returns the first error.
func populate(d *Daemon, machines, perMachine int) error {
	var wg sync.WaitGroup
	work := make(chan int, machines)
	for i := 0; i < machines; i++ {
		work <- i
	}
	close(work)
	var firstErr atomic.Value
	for w := 0; w < 20; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				err := func() error {
					tok, err := d.NewToken()
					if err != nil {
						return err
					}
					name := fmt.Sprintf("m-%d", i)
					if _, err := d.Register(tok, name); err != nil {
						return err
					}
					id, err := d.MachineID(name)
					if err != nil {
						return err
					}
					for j := 0; j < perMachine; j++ {
						if _, err := d.AddTunnel(id, fmt.Sprintf("t%d", j), "tcp", 1000+j, ""); err != nil {
							return err
						}
					}
					return nil
				}()
				if err != nil {
					// Strings: an atomic.Value holds one concrete type.
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return errors.New(e.(string))
	}
	return nil
}

// perRequest is processor time per request, for the figures whose ratio a
// busy machine blurs: it does not depend on what else runs.
func perRequest(cpu time.Duration, n uint64) string {
	if n == 0 {
		return "-"
	}
	return (cpu / time.Duration(n)).Round(100 * time.Nanosecond).String()
}

// lastError is the daemon's last logged error line, which says what a 500
// hid from the client.
func lastError(log string) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "level=ERROR") {
			return lines[i]
		}
	}
	return "no error logged"
}

func mb(b int64) float64 { return float64(b) / 1e6 }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// median is the middle of xs (the upper one of an even count), 0 for none.
func median[T cmp.Ordered](xs []T) T {
	var zero T
	if len(xs) == 0 {
		return zero
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
