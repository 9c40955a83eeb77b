package bench

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"
)

// EdgeChange: two edges (two daemons on one PostgreSQL database, the
// sealing key copied as `tunnelsvc edge join` does). A password tunnel
// made through edge A's API is timed from A's answer until edge B's access
// gate asks for the password for its host: the change made on one edge,
// applied on the other. The first tunnel warms both up and is not counted.
func EdgeChange(o Options) Row {
	const rounds = 10
	row := Row{
		Figure:   fmt.Sprintf("a change on edge A applied on edge B: a password tunnel made through A, until B's access gate guards it (median and slowest of %d, two daemons on one PostgreSQL)", rounds),
		Goal:     "< 1 s",
		Baseline: "—",
	}
	fail := func(err error) Row { row.Measured = "error: " + err.Error(); return row }
	url, err := o.postgresURL()
	if err != nil {
		return fail(err)
	}
	a, err := StartDaemonArgs(o.Bins, filepath.Join(o.Dir, "edge-a"), 0, url, "--edge-name", "edge-a")
	if err != nil {
		return fail(err)
	}
	defer a.Stop()
	if err := a.Setup(); err != nil {
		return fail(err)
	}
	key, err := os.ReadFile(filepath.Join(o.Dir, "edge-a", "data", "secret.key"))
	if err != nil {
		return fail(err)
	}
	bdir := filepath.Join(o.Dir, "edge-b")
	if err := os.MkdirAll(filepath.Join(bdir, "data"), 0o700); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(bdir, "data", "secret.key"), key, 0o600); err != nil {
		return fail(err)
	}
	b, err := StartDaemonArgs(o.Bins, bdir, 0, url, "--edge-name", "edge-b")
	if err != nil {
		return fail(err)
	}
	defer b.Stop()
	const domain = "bench.example.test"
	if err := a.Call(a.Client, "POST", "/api/local/skip", map[string]string{"domain": domain}, nil); err != nil {
		return fail(err)
	}
	tok, err := a.NewToken()
	if err != nil {
		return fail(err)
	}
	reg, err := a.Register(tok, "edge-bench")
	if err != nil {
		return fail(err)
	}
	m := regexp.MustCompile(`(?m)^user = 'm(\d+)'`).FindStringSubmatch(reg.ClientConfig)
	if m == nil {
		return fail(fmt.Errorf("no machine id in the client config"))
	}
	machine, _ := strconv.ParseInt(m[1], 10, 64)
	last := 0
	guarded := func(host string) bool { return guardedBy(b, host, &last) }
	var lastA int
	var took []time.Duration
	for i := 0; i <= rounds; i++ {
		sub := fmt.Sprintf("edge%d", i)
		body := map[string]any{"machine_id": machine, "name": sub, "kind": "http", "local_port": 8080, "subdomain": sub,
			"access": "password", "password": "correct horse battery staple"}
		if err := a.Call(a.Client, "POST", "/api/tunnels", body, nil); err != nil {
			return fail(err)
		}
		t0 := time.Now()
		for !guarded(sub + "." + domain) {
			if time.Since(t0) > 15*time.Second {
				guardedBy(a, sub+"."+domain, &lastA)
				return fail(fmt.Errorf("edge B did not guard %s.%s within 15 s (its gate answered %d, A's %d; daemon: %s)", sub, domain, last, lastA, lastError(b.Out.String())))
			}
			time.Sleep(2 * time.Millisecond)
		}
		if i > 0 {
			took = append(took, time.Since(t0))
		}
	}
	slowest := took[0]
	for _, d := range took {
		slowest = max(slowest, d)
	}
	med := median(took)
	row.Measured = fmt.Sprintf("median %s, slowest %s", med.Round(time.Millisecond), slowest.Round(time.Millisecond))
	row.Value = med.Seconds()
	row.Met = slowest < time.Second
	return row
}

// guardedBy reports whether d's access gate asks for a password at host,
// keeping the status it answered in last.
func guardedBy(d *Daemon, host string, last *int) bool {
	{
		req, _ := http.NewRequest("GET", "http://"+d.GateAddr+"/check", nil)
		req.Host = host
		req.Header.Set("X-Forwarded-Method", "GET")
		req.Header.Set("X-Forwarded-Uri", "/")
		res, err := noRedirects.Do(req)
		if err != nil {
			return false
		}
		res.Body.Close()
		*last = res.StatusCode
		return res.StatusCode == http.StatusFound
	}
}

// noRedirects sees the gate's redirect to its sign-in page as it is.
var noRedirects = &http.Client{Timeout: 10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
