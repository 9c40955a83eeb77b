package bench

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// vpsProc is one process the VPS spends processor time in.
type vpsProc struct {
	name string
	cpu  func() time.Duration
}

// vpsPath is one way from the load to the origin: where the load goes (URL
// and headers, "Host: ..." among them) and the VPS's processes on the way.
type vpsPath struct {
	name    string
	url     string
	headers []string
	procs   []vpsProc
}

// pathLoad is what a path carried over all its turns.
type pathLoad struct {
	rate     float64 // mean of the turns' rates
	requests uint64
	failed   uint64
	cpu      []time.Duration // per process of the path, over all turns
	// busy and wall: the VPS's CPUs' busy time and the wall time of the
	// path's turns (when pinned: how near the VPS was to its limit).
	busy, wall time.Duration
	// restBusy: the other CPUs' (the load's, frpc's and the origin's)
	// busy time over the same turns, summed over those CPUs.
	restBusy time.Duration
	restCPUs int
}

// total is the VPS's processor time over all turns.
func (l pathLoad) total() time.Duration {
	var t time.Duration
	for _, c := range l.cpu {
		t += c
	}
	return t
}

// perReq is the VPS's processor time per request in µs.
func (l pathLoad) perReq() float64 {
	if l.requests == 0 {
		return 0
	}
	return float64(l.total()) / float64(l.requests) / float64(time.Microsecond)
}

// describe: "13400 req/s, VPS CPU 70.1 µs per request (Caddy 56.0 + frps 14.1)".
func (l pathLoad) describe(p vpsPath) string {
	var parts []string
	for i, pr := range p.procs {
		if l.requests > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f", pr.name, float64(l.cpu[i])/float64(l.requests)/float64(time.Microsecond)))
		}
	}
	s := fmt.Sprintf("%.0f req/s, VPS CPU %.1f µs per request (%s)", l.rate, l.perReq(), strings.Join(parts, " + "))
	if l.wall > 0 && l.busy > 0 {
		s += fmt.Sprintf(", VPS CPU %.0f%% busy", 100*float64(l.busy)/float64(l.wall))
		if l.restCPUs > 0 {
			s += fmt.Sprintf(" (the load's side %.0f%%)", 100*float64(l.restBusy)/float64(l.wall)/float64(l.restCPUs))
		}
	}
	if l.failed > 0 {
		s += fmt.Sprintf(", %d failed", l.failed)
	}
	return s
}

// measurePaths loads each path with wrk (conns connections) in turns of
// a second until each has had the whole duration, and reads each VPS
// process's processor time around its path's turns.
func (w *World) measurePaths(paths []vpsPath, threads, conns int) ([]pathLoad, error) {
	turns := max(1, int(w.opts.Duration/time.Second))
	out := make([]pathLoad, len(paths))
	for i := range out {
		out[i].cpu = make([]time.Duration, len(paths[i].procs))
	}
	for t := 0; t < turns; t++ {
		for i, p := range paths {
			before := make([]time.Duration, len(p.procs))
			for j, pr := range p.procs {
				before[j] = pr.cpu()
			}
			var busy0, rest0 time.Duration
			if w.pinnedNow {
				busy0, rest0 = setBusy(w.cpus.VPS), setBusy(w.cpus.Rest)
			}
			t0 := time.Now()
			l, err := runWrk(p.url, threads, conns, time.Second, p.headers...)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			for j, pr := range p.procs {
				out[i].cpu[j] += pr.cpu() - before[j]
			}
			if w.pinnedNow {
				out[i].busy += setBusy(w.cpus.VPS) - busy0
				out[i].restBusy += setBusy(w.cpus.Rest) - rest0
				out[i].restCPUs = w.cpus.Rest.Count()
				out[i].wall += time.Since(t0)
			}
			out[i].rate += l.Rate / float64(turns)
			out[i].requests += l.Requests
			out[i].failed += l.Failed
		}
	}
	return out, nil
}

// HTTPPinned: HTTP through the tunnel against Caddy alone with the VPS's
// processes on a CPU of their own, and the peers beside them in the same
// turns.
func (w *World) HTTPPinned() Row {
	row := Row{
		Figure:   "HTTP, VPS pinned: Caddy → frps → frpc → origin / Caddy → origin (wrk, 50 connections), peers in the same turns",
		Goal:     "≥ 0.95 × the relays' ratio; VPS CPU per request ≤ 1.05 × the relays'; ≥ 1.3 × OpenSSH's and frp's vhost's req/s, ≤ 1/1.3 of their VPS CPU per request",
		Baseline: "Caddy straight to the origin, same run, same pinning",
	}
	if err := w.Pin(true); err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	defer w.Pin(false)
	caddyURL := fmt.Sprintf("http://127.0.0.1:%d/", w.CaddyPort)
	caddy := vpsProc{"Caddy", w.Caddy.CPU}
	sshdPID := w.peers.SSHD.Cmd.Process.Pid
	paths := []vpsPath{
		{"tunnel", caddyURL, []string{"Host: " + tunnelHost}, []vpsProc{caddy, {"frps", w.FRPS.CPU}, {"daemon", w.Daemon.CPU}}},
		{"Caddy alone", caddyURL, []string{"Host: " + directHost}, []vpsProc{caddy}},
		{"OpenSSH `ssh -R` behind Caddy", caddyURL, []string{"Host: " + sshHost}, []vpsProc{caddy, {"sshd", func() time.Duration { return treeCPU(sshdPID) }}}},
		{"frp's own HTTP vhost", fmt.Sprintf("http://127.0.0.1:%d/", w.peers.VhostPort), []string{"Host: " + vhostHost}, []vpsProc{{"frps", w.peers.VhostFRPS.CPU}}},
		{relayPair + " behind Caddy", caddyURL, []string{"Host: " + relayHost}, []vpsProc{caddy, {"relay", w.RelayHTTP.Procs[1].CPU}}},
	}
	ls, err := w.measurePaths(paths, w.cpus.Rest.Count(), 50)
	if err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	tunnel, alone, ssh, vhost, relay := ls[0], ls[1], ls[2], ls[3], ls[4]
	row.Value = ratio(tunnel.rate, alone.rate)
	cpuRatio := ratio(tunnel.perReq(), alone.perReq())
	var b strings.Builder
	fmt.Fprintf(&b, "tunnel %s; Caddy alone %s; tunnel's VPS CPU per request %.2f × Caddy alone's", tunnel.describe(paths[0]), alone.describe(paths[1]), cpuRatio)
	for i, l := range []pathLoad{ssh, vhost, relay} {
		fmt.Fprintf(&b, "; %s %s (%.3f)", paths[i+2].name, l.describe(paths[i+2]), ratio(l.rate, alone.rate))
	}
	// The goals: two bare TLS relays in frps's place are the floor of any
	// design with a second process on the VPS's path; the peers are what
	// operators use instead.
	relayRatio, relayCPU := ratio(relay.rate, alone.rate), ratio(tunnel.perReq(), relay.perReq())
	vsSSH, vsVhost := ratio(tunnel.rate, ssh.rate), ratio(tunnel.rate, vhost.rate)
	cpuSSH, cpuVhost := ratio(ssh.perReq(), tunnel.perReq()), ratio(vhost.perReq(), tunnel.perReq())
	fmt.Fprintf(&b, "; against the goals: %.2f × the relays' ratio, %.2f × their VPS CPU per request; %.2f × OpenSSH's and %.2f × frp's vhost's req/s, %.2f × and %.2f × less VPS CPU per request",
		ratio(row.Value, relayRatio), relayCPU, vsSSH, vsVhost, cpuSSH, cpuVhost)
	fmt.Fprintf(&b, "; %s", w.pinLabel())
	row.Measured = b.String()
	row.Met = row.Value >= 0.95*relayRatio && relayCPU <= 1.05 && min(vsSSH, vsVhost, cpuSSH, cpuVhost) >= 1.3 &&
		tunnel.failed == 0 && alone.failed == 0
	if tunnel.perReq() > 0 {
		row.Means = fmt.Sprintf("HTTP through the tunnel: one 1-vCPU VPS like this one carries about %.0f req/s of small requests, against %.0f req/s with Caddy serving the origin directly (%.0f and %.0f µs of VPS CPU per request).",
			tunnel.rate, alone.rate, tunnel.perReq(), alone.perReq())
	}
	return row
}

// pinnedRow runs f with the VPS pinned and labels its row.
func (w *World) pinnedRow(f func() Row) Row {
	if err := w.Pin(true); err != nil {
		return Row{Figure: "VPS pinned", Measured: "error: " + err.Error()}
	}
	defer w.Pin(false)
	r := f()
	r.Figure = "VPS pinned: " + r.Figure
	r.Measured += "; " + w.pinLabel()
	r.Baseline += ", same pinning"
	return r
}

// unpinned labels a row measured with every process free on every CPU.
func unpinned(r Row) Row {
	r.Figure = "unpinned: " + r.Figure
	return r
}

// TCPPinned: iperf3 through the tunnel against direct, frps on the VPS's
// CPU, iperf3's both ends and frpc on the others.
//
// Its value is what one VPS processor carries: Gbit/s per second of VPS
// CPU (frps and the daemon), the NIC being a VPS's real limit; the ratio
// to direct loopback stays in the row.
func (w *World) TCPPinned() Row {
	r := w.pinnedRow(w.TCPThroughput)
	r.Goal = "≥ 5 Gbit/s per VPS CPU (the ratio to direct loopback is reported)"
	r.Baseline = "value: Gbit/s carried per second of VPS CPU; " + r.Baseline
	r.Value, r.Met = 0, false
	if m := tcpPerGB.FindStringSubmatch(r.Measured); m != nil {
		if s, err := strconv.ParseFloat(m[1], 64); err == nil && s > 0 {
			r.Value = 8 / s
			r.Met = r.Value >= 5
			r.Measured += fmt.Sprintf("; %.1f Gbit/s per VPS CPU", r.Value)
		}
	}
	if m := tcpThrough.FindStringSubmatch(r.Measured); m != nil {
		r.Means = "TCP through the tunnel (iperf3): one 1-vCPU VPS forwards about " + m[1] + " Gbit/s for one machine."
	}
	return r
}

var (
	tcpThrough = regexp.MustCompile(`^([\d.]+) / `)
	// tcpPerGB: seconds of VPS CPU per GB through the tunnel.
	tcpPerGB = regexp.MustCompile(`frps and the daemon ([\d.]+) s`)
)
