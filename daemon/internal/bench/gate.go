package bench

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

const gatePassword = "bench gate shared passphrase 42"

// GateCheck: the question Caddy's forward_auth asks the daemon before every
// request to a gated HTTP tunnel, sent to the real daemon's gate listener
// over one kept-alive loopback connection (as Caddy's pool does) by a
// signed-in browser, one after another for the run's duration; the median
// and 99th percentile latency against a bare net/http handler asked the
// same way.
func (w *World) GateCheck() Row {
	row := Row{Figure: "access gate check (Caddy's forward_auth → daemon, signed in, loopback), median latency",
		Goal: "< 100 µs", Baseline: "bare net/http handler in a process of its own, same run"}
	d := w.Daemon
	var t Tunnel
	err := d.Call(d.Client, "POST", "/api/tunnels", map[string]any{"machine_id": w.MachineID, "name": "vault", "kind": "http",
		"local_port": w.OriginPort, "subdomain": "vault", "access": "password", "password": gatePassword}, &t)
	if err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	defer d.Call(d.Client, "DELETE", fmt.Sprintf("/api/tunnels/%d", t.ID), nil, nil)
	host := "vault." + domain
	cookie, err := gateSignIn(d.GateAddr, host)
	if err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	hdr := http.Header{"Cookie": {"theme=dark; " + cookie}, "X-Forwarded-For": {"203.0.113.9"},
		"X-Forwarded-Method": {"GET"}, "X-Forwarded-Uri": {"/dashboard/?x=1"}, "X-Forwarded-Proto": {"https"}}
	cpu0 := d.CPU()
	gate, err := latencies("http://"+d.GateAddr+"/check", host, hdr, w.opts.Duration)
	cpu := d.CPU() - cpu0
	if err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	bcpu0 := w.Baseline.CPU()
	bare, err := latencies("http://"+w.BaselineAddr+"/", host, hdr, w.opts.Duration)
	bcpu := w.Baseline.CPU() - bcpu0
	if err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	med, p99 := pct(gate, 50), pct(gate, 99)
	row.Measured = fmt.Sprintf("%s (p99 %s) / %s (p99 %s), %d checks; CPU per check: daemon %s, bare handler %s",
		us(med), us(p99), us(pct(bare, 50)), us(pct(bare, 99)), len(gate),
		perRequest(cpu, uint64(len(gate))), perRequest(bcpu, uint64(len(bare))))
	row.Value = float64(med) / float64(time.Microsecond)
	row.Met = med < 100*time.Microsecond
	return row
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

func pct(ds []time.Duration, p int) time.Duration {
	return ds[min(len(ds)-1, len(ds)*p/100)]
}

// gateSignIn signs in at the gate's password page, as the proxy would
// forward it, and returns the gate cookie.
func gateSignIn(gateAddr, host string) (string, error) {
	req, _ := http.NewRequest("POST", "http://"+gateAddr+"/.tunnelsvc/login", strings.NewReader(url.Values{"password": {gatePassword}}.Encode()))
	req.Host = host
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Name == "tunnelsvc_gate" {
			return ck.Name + "=" + ck.Value, nil
		}
	}
	b, _ := io.ReadAll(resp.Body)
	return "", fmt.Errorf("gate sign-in at %s: %d %.200s", host, resp.StatusCode, b)
}

// latencies asks url one request after another on one connection for d
// and returns the sorted latencies; any answer but 200 is an error.
func latencies(u, host string, hdr http.Header, d time.Duration) ([]time.Duration, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	req, _ := http.NewRequest("GET", u, nil)
	req.Host = host
	req.Header = hdr
	var out []time.Duration
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		t0 := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return nil, fmt.Errorf("%s: %d", u, resp.StatusCode)
		}
		out = append(out, time.Since(t0))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no answer within %s", u, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}
