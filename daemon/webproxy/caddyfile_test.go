package webproxy

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// needCaddy skips a test that runs the real caddy when it is missing. Only
// such tests call it: a golden comparison needs no tool and always runs.
func needCaddy(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Skip("caddy not installed (apt-get install caddy)")
	}
}

// caddyAccepts has the real caddy check a rendered file: caddy validate
// takes it, and caddy fmt leaves it as it is, so an operator editing the
// custom block sees no warnings. It runs as a subtest of its own, so that a
// missing caddy skips this check and not the golden comparison before it.
func caddyAccepts(t *testing.T, name string, got []byte) {
	t.Helper()
	t.Run("caddy", func(t *testing.T) {
		needCaddy(t)
		if err := caddyValidate(t, got); err != nil {
			t.Fatalf("caddy validate refused the golden %s: %v", name, err)
		}
		path := filepath.Join(t.TempDir(), "Caddyfile")
		os.WriteFile(path, got, 0o644)
		if out, err := exec.Command("caddy", "fmt", path).Output(); err != nil || string(out) != string(got) {
			t.Fatalf("caddy fmt would reformat %s (%v):\n%s", name, err, out)
		}
	})
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		os.WriteFile(path, got, 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func caddyValidate(t *testing.T, content []byte) error {
	t.Helper()
	d := &Deployer{Path: filepath.Join(t.TempDir(), "Caddyfile"), Run: cmdrun.Exec{}}
	return d.Validate(context.Background(), content)
}

func TestGoldenCaddyfiles(t *testing.T) {
	tunnels := []HTTPTunnel{{Subdomain: "wiki", Port: 20011}, {Subdomain: "grafana", Port: 20007}, {Subdomain: "nas-ui", Port: 20003}}
	cases := map[string]Input{
		"no-tunnels": {Domain: "example.com", Dashboard: "127.0.0.1:7380"},
		"tunnels":    {Domain: "example.com", Dashboard: "127.0.0.1:7380", Tunnels: tunnels},
		"custom":     {Domain: "example.com", Dashboard: "127.0.0.1:7380", Tunnels: tunnels[:1], Custom: "static.example.com {\n\trespond \"hello\"\n}\n"},
		"bind-ip":    {Domain: "example.com", Dashboard: "127.0.0.1:7380", Tunnels: tunnels[:2], BindIP: "203.0.113.5"},
		// caddy validate reads the root file: a real PEM, relative to the
		// package directory (the set-up only ever stores absolute paths).
		"acme-ca": {Domain: "example.com", Dashboard: "127.0.0.1:7380", Tunnels: tunnels[:1],
			ACMECA: "https://acme-staging-v02.api.letsencrypt.org/directory", ACMECARoot: "testdata/acme-root.pem"},
		// The caddy package's own file, as the daemon imports it.
		"import": {Domain: "example.com", Dashboard: "127.0.0.1:7380", Tunnels: tunnels[:1], BindIP: "203.0.113.5", Import: "/etc/caddy/Caddyfile"},
		// Paused tunnels have no site, only their names in a comment.
		"paused": {Domain: "example.com", Dashboard: "127.0.0.1:7380", Tunnels: tunnels[:1], Paused: []string{"nas-ui", "grafana"}},
		// One edge of several: the challenges it did not order go to the gate.
		"edges": {Domain: "example.com", Dashboard: "127.0.0.1:7380", Tunnels: tunnels[:1], Gate: "127.0.0.1:7382", RelayACME: true},
		"edges-acme-ca": {Domain: "example.com", Dashboard: "127.0.0.1:7380", Tunnels: tunnels[:1], Gate: "127.0.0.1:7382", RelayACME: true,
			ACMECA: "https://acme-staging-v02.api.letsencrypt.org/directory", ACMECARoot: "testdata/acme-root.pem"},
		// Sites served by several machines: failover with a health check,
		// round robin without, and a gated one.
		"targets": {Domain: "example.com", Dashboard: "127.0.0.1:7380", Gate: "127.0.0.1:7382", Gates: map[string]GateMode{"grafana": GateOperator},
			Tunnels: []HTTPTunnel{
				{Subdomain: "wiki", Port: 20011, More: []int{20012, 20013}, Balance: "failover", Health: Health{Path: "/healthz?full=1", IntervalS: 5, ExpectStatus: 204}},
				{Subdomain: "grafana", Port: 20007, More: []int{20008}, Balance: "round_robin", Health: Health{Path: "/api/health", IntervalS: 30}},
				{Subdomain: "nas-ui", Port: 20003, More: []int{20004}, Balance: "round_robin"},
			}},
		// Machines on port 443 reach the tunnel server through the gate
		// listener, with the tunnel CA's certificate (a real pair: caddy
		// validate loads it).
		"wss": {Domain: "example.com", Dashboard: "127.0.0.1:7380", Gate: "127.0.0.1:7382", Tunnels: tunnels[:1],
			WSS: &WSSSite{Name: "revtunnel-server.tunnelsvc.invalid", CertFile: "testdata/wss.crt", KeyFile: "testdata/wss.key", Serial: "1f2e3d"}},
		// The visitor's address in a PROXY protocol header: the site's
		// requests go to the daemon's hop, on every target's port, with
		// the visitor Caddy saw; one gated, one not.
		"proxy-protocol": {Domain: "example.com", Dashboard: "127.0.0.1:7380", Gate: "127.0.0.1:7382", Gates: map[string]GateMode{"shop": GateCheck},
			Tunnels: []HTTPTunnel{
				{Subdomain: "shop", Port: 20011, More: []int{20012}, ProxyProtocol: "v2"},
				{Subdomain: "mail", Port: 20013, ProxyProtocol: "v1"},
				{Subdomain: "wiki", Port: 20014},
			}},
		// A fallback page while no machine answers, one site gated; the
		// message's characters that mean something in HTML or in a
		// Caddyfile are written as character references.
		"fallback": {Domain: "example.com", Dashboard: "127.0.0.1:7380", Gate: "127.0.0.1:7382", Gates: map[string]GateMode{"shop": GateCheck},
			Tunnels: []HTTPTunnel{
				{Subdomain: "shop", Port: 20011, More: []int{20012}, Fallback: "Back soon: \"maintenance\" {until} 14:00 <b>UTC</b> \\ & thanks.\nCall us."},
				{Subdomain: "wiki", Port: 20014, Fallback: "The wiki is asleep."},
			}},
		// Tunnels with their own domains, one of them gated.
		"domains": {Domain: "example.com", Dashboard: "127.0.0.1:7380", Gate: "127.0.0.1:7382", Gates: map[string]GateMode{"wiki": GateCheck, "blog": GateSSO},
			Tunnels: []HTTPTunnel{
				{Subdomain: "wiki", Port: 20011, Domains: []string{"wiki.example.org", "docs.example.net"}},
				{Subdomain: "blog", Port: 20012, Domains: []string{"blog.example.org"}},
			}},
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Render(in)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, got)
			caddyAccepts(t, name, got)
		})
	}
}

// TestRenderRefusesBadTargets: a health check, balance or PROXY protocol
// the API would refuse never reaches the Caddyfile.
func TestRenderRefusesBadTargets(t *testing.T) {
	for _, c := range []struct {
		t    HTTPTunnel
		want string
	}{
		{HTTPTunnel{Subdomain: "a", Port: 20001, More: []int{70000}}, "tunnel a target: "},
		{HTTPTunnel{Subdomain: "a", Port: 20001, Domains: []string{"x.org {"}}, `tunnel a: domain "x.org {" is not a fully qualified domain name`},
		{HTTPTunnel{Subdomain: "a", Port: 20001, Domains: []string{"localhost"}}, `tunnel a: domain "localhost" is not a fully qualified domain name`},
		{HTTPTunnel{Subdomain: "a", Port: 20001, Balance: "random"}, `tunnel a: balance "random"`},
		{HTTPTunnel{Subdomain: "a", Port: 20001, ProxyProtocol: "v3"}, `tunnel a: PROXY protocol "v3"`},
		{HTTPTunnel{Subdomain: "a", Port: 20001, Health: Health{Path: "/x {", IntervalS: 5}}, "health.path must start with /"},
		{HTTPTunnel{Subdomain: "a", Port: 20001, Health: Health{Path: "healthz", IntervalS: 5}}, "health.path must start with /"},
		{HTTPTunnel{Subdomain: "a", Port: 20001, Health: Health{Path: "/h", IntervalS: 0}}, "health.interval_s must be between 1 and 3600"},
		{HTTPTunnel{Subdomain: "a", Port: 20001, Health: Health{Path: "/h", IntervalS: 5, ExpectStatus: 99}}, "health.expect_status must be an HTTP status"},
	} {
		_, err := Render(Input{Domain: "example.com", Dashboard: "127.0.0.1:7380", Tunnels: []HTTPTunnel{c.t}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.t, err, c.want)
		}
	}
}

func TestRenderNeedsDomain(t *testing.T) {
	if _, err := Render(Input{}); err == nil {
		t.Fatal("rendered without a domain")
	}
}

type fakeUnits struct {
	active    bool
	reloadErr error
	reloads   int
}

func (f *fakeUnits) State(context.Context, string) (units.State, error) {
	if f.active {
		return units.State{ActiveState: "active"}, nil
	}
	return units.State{ActiveState: "inactive"}, nil
}
func (f *fakeUnits) Reload(context.Context, string) error {
	f.reloads++
	return f.reloadErr
}

func TestDeployKeepsCustomAndRefusesInvalid(t *testing.T) {
	needCaddy(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "etc", "tunnelsvc", "Caddyfile")
	units := &fakeUnits{active: true}
	d := &Deployer{Path: path, Run: cmdrun.Exec{}, Units: units}
	in := Input{Domain: "example.com", Dashboard: "127.0.0.1:7380"}
	if changed, err := d.Deploy(ctx, in); err != nil || !changed || units.reloads != 1 {
		t.Fatalf("first deploy: %v %v reloads=%d", changed, err, units.reloads)
	}
	// Same state: nothing to do, no reload.
	if changed, err := d.Deploy(ctx, in); err != nil || changed || units.reloads != 1 {
		t.Fatalf("unchanged deploy: %v %v reloads=%d", changed, err, units.reloads)
	}
	// The operator adds a site in the custom block; a new tunnel keeps it.
	b, _ := os.ReadFile(path)
	custom := "extra.example.com {\n\trespond \"kept\"\n}\n"
	os.WriteFile(path, []byte(strings.Replace(string(b), BeginCustom+"\n", BeginCustom+"\n"+custom, 1)), 0o644)
	in.Tunnels = []HTTPTunnel{{Subdomain: "app", Port: 20001}}
	if _, err := d.Deploy(ctx, in); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if ExtractCustom(b) != custom || !strings.Contains(string(b), "app.example.com {") {
		t.Fatalf("custom block lost or tunnel missing:\n%s", b)
	}

	// A broken custom block makes every new render invalid: nothing is
	// written, and the error carries caddy's own words.
	broken := strings.Replace(string(b), custom, "extra.example.com {\n\tnot_a_directive\n}\n", 1)
	os.WriteFile(path, []byte(broken), 0o644)
	in.Tunnels = append(in.Tunnels, HTTPTunnel{Subdomain: "blog", Port: 20002})
	_, err := d.Deploy(ctx, in)
	var te *cmdrun.ToolError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "not_a_directive") {
		t.Fatalf("invalid deploy error = %v", err)
	}
	if now, _ := os.ReadFile(path); string(now) != broken {
		t.Fatal("a rejected Caddyfile replaced the deployed one")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
}

func TestDeployRestoresOnReloadFailure(t *testing.T) {
	needCaddy(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "Caddyfile")
	units := &fakeUnits{active: true}
	d := &Deployer{Path: path, Run: cmdrun.Exec{}, Units: units}
	if _, err := d.Deploy(ctx, Input{Domain: "example.com", Dashboard: "127.0.0.1:7380"}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	units.reloadErr = errors.New("Job for caddy.service failed")
	_, err := d.Deploy(ctx, Input{Domain: "example.com", Dashboard: "127.0.0.1:7380", Tunnels: []HTTPTunnel{{Subdomain: "x", Port: 20001}}})
	if err == nil || !strings.Contains(err.Error(), "Job for caddy.service failed") {
		t.Fatalf("err = %v", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("the previous Caddyfile was not restored after a failed reload")
	}
}

// startCaddy runs a real caddy on the rendered file and waits until it serves.
func startCaddy(t *testing.T, file []byte, port int) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	os.WriteFile(path, file, 0o644)
	cmd := exec.Command("caddy", "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	out, _ := os.Create(filepath.Join(dir, "caddy.log"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 100*time.Millisecond); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "caddy.log"))
	t.Fatalf("caddy did not listen on %d:\n%s", port, log)
}

// fetch asks 127.0.0.1:port for / with the given Host header.
func fetch(t *testing.T, port int, host string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/", port), nil)
	req.Host = host
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRealCaddyRoutesByHost: the rendered file, served by a real caddy,
// sends router.<domain> to the dashboard and <sub>.<domain> to its port,
// with the client's address in X-Forwarded-For.
func TestRealCaddyRoutesByHost(t *testing.T) {
	needCaddy(t)
	dash := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "dashboard xff=%s", r.Header.Get("X-Forwarded-For"))
	}))
	defer dash.Close()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "app says hi")
	}))
	defer app.Close()
	appPort := app.Listener.Addr().(*net.TCPAddr).Port
	port := testutil.FreePort(t)
	file, err := Render(Input{
		Domain: "example.test", Dashboard: dash.Listener.Addr().String(),
		Tunnels: []HTTPTunnel{{Subdomain: "app", Port: appPort}}, PlainHTTPPort: port, Admin: "off",
	})
	if err != nil {
		t.Fatal(err)
	}
	startCaddy(t, file, port)
	if code, body := fetch(t, port, "router.example.test"); code != 200 || body != "dashboard xff=127.0.0.1" {
		t.Fatalf("dashboard: %d %q", code, body)
	}
	if code, body := fetch(t, port, "app.example.test"); code != 200 || body != "app says hi" {
		t.Fatalf("tunnel: %d %q", code, body)
	}
}

// TestRealCaddyRelaysChallengesItDidNotOrder: on one edge of several, a
// real caddy with automatic HTTPS sends a challenge request it did not
// order to the gate, even for names it serves over HTTPS (its own
// redirects would send the CA to HTTPS instead, and the caddy package's
// catch-all :80 site would answer them), and redirects the rest of this
// domain to HTTPS; the operator's other names stay the operator's. Its CA
// is a loopback port nothing answers on.
func TestRealCaddyRelaysChallengesItDidNotOrder(t *testing.T) {
	needCaddy(t)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "gate %s %s", r.Host, r.URL.Path)
	}))
	defer gate.Close()
	httpPort, httpsPort, nothing := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
	// The operator's own Caddyfile, as the caddy package ships it: a site
	// for any name on plain HTTP.
	operator := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(operator, []byte("http:// {\n\trespond \"operator site\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file, err := Render(Input{
		Domain: "example.test", Dashboard: "127.0.0.1:1", Tunnels: []HTTPTunnel{{Subdomain: "app", Port: 1}}, Admin: "off",
		Gate: gate.Listener.Addr().String(), RelayACME: true, HTTPPort: httpPort, HTTPSPort: httpsPort,
		ACMECA: fmt.Sprintf("https://127.0.0.1:%d/dir", nothing), Import: operator,
	})
	if err != nil {
		t.Fatal(err)
	}
	startCaddy(t, file, httpPort)
	noRedirect := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(host, path string) (int, string, string) {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d%s", httpPort, path), nil)
		req.Host = host
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("Location")
	}
	for _, host := range []string{"router.example.test", "app.example.test", "other.example.test"} {
		if code, body, _ := get(host, "/.well-known/acme-challenge/tok-1"); code != 200 || body != "gate "+host+" /.well-known/acme-challenge/tok-1" {
			t.Errorf("challenge for %s: %d %q, want the gate's answer", host, code, body)
		}
	}
	if code, _, loc := get("router.example.test", "/x?y=1"); code != http.StatusPermanentRedirect || loc != fmt.Sprintf("https://router.example.test:%d/x?y=1", httpsPort) {
		t.Errorf("plain HTTP: %d to %q, want a 308 to HTTPS", code, loc)
	}
	// The operator's other names are the operator's site's.
	if code, body, _ := get("blog.operator.test", "/.well-known/acme-challenge/tok-1"); code != 200 || body != "operator site" {
		t.Errorf("the operator's own name: %d %q", code, body)
	}
}

// TestRealCaddyBoundsConnectionsToATunnel: however many requests come in at
// once, a real caddy running the rendered file opens at most
// TunnelMaxConns connections to a tunnel's port; the others wait for one
// and are answered once the back end answers.
func TestRealCaddyBoundsConnectionsToATunnel(t *testing.T) {
	needCaddy(t)
	const clients = TunnelMaxConns + 60
	var mu sync.Mutex
	open, most := 0, 0
	release := make(chan struct{})
	app := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		fmt.Fprint(w, "app says hi")
	}))
	app.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			open++
			most = max(most, open)
		case http.StateClosed, http.StateHijacked:
			open--
		}
	}
	app.Start()
	defer app.Close()
	port := testutil.FreePort(t)
	file, err := Render(Input{
		Domain: "example.test", Dashboard: "127.0.0.1:9",
		Tunnels: []HTTPTunnel{{Subdomain: "app", Port: app.Listener.Addr().(*net.TCPAddr).Port}}, PlainHTTPPort: port, Admin: "off",
	})
	if err != nil {
		t.Fatal(err)
	}
	startCaddy(t, file, port)

	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxConnsPerHost: clients, MaxIdleConnsPerHost: clients}}
	errs := make(chan error, clients)
	for i := 0; i < clients; i++ {
		go func() {
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/", port), nil)
			req.Host = "app.example.test"
			resp, err := client.Do(req)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != "app says hi" {
					err = fmt.Errorf("%d %q", resp.StatusCode, b)
				}
			}
			errs <- err
		}()
	}
	seen := func() int { mu.Lock(); defer mu.Unlock(); return most }
	// Wait until caddy has opened as many connections as it may, then give
	// it a moment in which any further one would show.
	deadline := time.Now().Add(30 * time.Second)
	for seen() < TunnelMaxConns && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second)
	n := seen()
	close(release)
	for i := 0; i < clients; i++ {
		if err := <-errs; err != nil {
			t.Errorf("request through caddy: %v", err)
		}
	}
	if n != TunnelMaxConns {
		t.Fatalf("%d requests at once made caddy open %d connections to the tunnel's port, want %d", clients, n, TunnelMaxConns)
	}
}

// TestHopPorts: every port of a PROXY-protocol site goes to the hop, with
// its version, and no other.
func TestHopPorts(t *testing.T) {
	got := HopPorts([]HTTPTunnel{
		{Subdomain: "shop", Port: 20011, More: []int{20012}, ProxyProtocol: "v2"},
		{Subdomain: "mail", Port: 20013, ProxyProtocol: "v1"},
		{Subdomain: "wiki", Port: 20014, More: []int{20015}},
	})
	want := map[int]string{20011: "v2", 20012: "v2", 20013: "v1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("HopPorts = %v, want %v", got, want)
	}
}
