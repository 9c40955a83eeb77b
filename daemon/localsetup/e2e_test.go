package localsetup_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/daemontest"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

var frps, frpc, pebbleBin string

func TestMain(m *testing.M) {
	auth.LowCostForTests()
	frps, frpc = testutil.FRP()
	pebbleBin = testutil.PebbleBin()
	os.Exit(m.Run())
}

// webApp is a daemon (daemontest) with the domain example.test, and a
// machine "nas" joined to it whose HTTP tunnel sub, also served at its own
// domains, leads to a web app on the machine's loopback that answers
// "<answer>, path <path>", through real frps and frpc. Everything the
// operator does goes through the API.
type webApp struct {
	d      *daemontest.Daemon
	c      *daemontest.Client
	tunnel int64
	// port is the tunnel's port on frps; machine is nas's id, frpc its
	// tunnel client.
	port    int
	machine int64
	frpc    *testutil.Proc
}

func newWebApp(t *testing.T, sub, answer string, domains ...string) *webApp {
	t.Helper()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s, path %s", answer, r.URL.Path)
	}))
	t.Cleanup(web.Close)
	in := map[string]any{"local_port": web.Listener.Addr().(*net.TCPAddr).Port}
	if len(domains) > 0 {
		in["domains"] = domains
	}
	return newSite(t, sub, in)
}

// newSite is newWebApp for a service of the test's own: in holds the
// tunnel's local_port and any other fields of its POST.
func newSite(t *testing.T, sub string, in map[string]any) *webApp {
	t.Helper()
	d := daemontest.Start(t, daemontest.Options{})
	c := d.Setup(t)
	d.RunFRPS(t)
	if code, body := c.Call("POST", "/api/local/skip", map[string]string{"domain": "example.test"}, nil); code != 200 {
		t.Fatalf("domain: %d %s", code, body)
	}
	nas := d.Join(t, c, "nas")
	in["machine_id"], in["name"], in["kind"], in["subdomain"] = nas.ID, sub, "http", sub
	var tun struct {
		ID         int64 `json:"id"`
		RemotePort int   `json:"remote_port"`
	}
	if code, body := c.Call("POST", "/api/tunnels", in, &tun); code != 201 {
		t.Fatalf("create tunnel: %d %s", code, body)
	}
	var conf string
	if code, _ := c.Call("GET", fmt.Sprintf("/api/machines/%d/revtunnel-client", nas.ID), nil, &conf); code != 200 {
		t.Fatalf("client config: %d %s", code, conf)
	}
	frpc := d.RunFRPC(t, "nas", conf, 0)
	testutil.WaitListening(t, tun.RemotePort, 10*time.Second)
	return &webApp{d: d, c: c, tunnel: tun.ID, port: tun.RemotePort, machine: nas.ID, frpc: frpc}
}

// daemonCaddyfile is the Caddyfile d renders for its web proxy, with
// edit's changes for a test (loopback ports instead of 80 and 443, no
// admin endpoint), checked by the real caddy.
func daemonCaddyfile(t *testing.T, d *daemontest.Daemon, edit func(*webproxy.Input)) []byte {
	t.Helper()
	ctx := context.Background()
	setup := d.App.Setup
	in, ok, err := setup.ProxyInput(ctx)
	if err != nil || !ok {
		t.Fatalf("proxy input: %v %v", ok, err)
	}
	in.Admin = "off"
	edit(&in)
	file, err := webproxy.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := setup.Proxy.Validate(ctx, file); err != nil {
		t.Fatalf("caddy refused the rendered file: %v\n%s", err, file)
	}
	return file
}

// TestCaddyInFrontOfRealTunnel: a machine registers, gets an HTTP tunnel to
// its local web server, and a real caddy running the Caddyfile the daemon
// rendered serves that web server at <sub>.<domain> through real frps and
// frpc. Renaming the tunnel's subdomain moves the site.
func TestCaddyInFrontOfRealTunnel(t *testing.T) {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Skip("caddy is not installed (scripts/install-deps.sh installs it)")
	}
	w := newWebApp(t, "files", "machine web app")
	dir := w.d.Dir
	caddyPort := testutil.FreePort(t)
	file := daemonCaddyfile(t, w.d, func(in *webproxy.Input) { in.PlainHTTPPort, in.WSS = caddyPort, nil }) // plain HTTP: no wss site
	caddyfile := filepath.Join(dir, "Caddyfile")
	os.WriteFile(caddyfile, file, 0o644)
	t.Setenv("XDG_DATA_HOME", dir) // caddy's storage stays in the test's directory
	t.Setenv("XDG_CONFIG_HOME", dir)
	testutil.Start(t, "caddy", "caddy", "run", "--config", caddyfile, "--adapter", "caddyfile")
	testutil.WaitListening(t, caddyPort, 10*time.Second)

	get := func(host string) (int, string) {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/docs/", caddyPort), nil)
		req.Host = host
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("files.example.test"); code != 200 || body != "machine web app, path /docs/" {
		t.Fatalf("through caddy, frps and frpc: %d %q", code, body)
	}
	if _, body := get("other.example.test"); strings.Contains(body, "machine web app") {
		t.Fatal("a host without a tunnel reached the machine")
	}

	// Once the proxy is installed, the daemon keeps its Caddyfile as the
	// database says: renaming the tunnel's subdomain redeploys it.
	// (What the installation records; the install itself needs systemd.)
	setup := w.d.App.Setup
	if err := setup.Settings.SaveVPS(context.Background(), localsetup.VPS{Domain: "example.test", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if code, body := w.c.Call("PATCH", fmt.Sprintf("/api/tunnels/%d", w.tunnel), map[string]any{"subdomain": "docs"}, nil); code != 200 {
		t.Fatalf("rename: %d %s", code, body)
	}
	took := testutil.Eventually(t, 10*time.Second, "Caddyfile follows the rename", func() error {
		b, err := os.ReadFile(setup.Proxy.Path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "docs.example.test {") || strings.Contains(string(b), "files.example.test") {
			return fmt.Errorf("deployed Caddyfile:\n%s", b)
		}
		return nil
	})
	t.Logf("Caddyfile redeployed %v after the rename", took)
}

// TestVisitorAddressThroughHTTPTunnels: a visitor in a network namespace
// the test made reaches sites through real Caddy (the Caddyfile the daemon
// rendered), frps and frpc, with Debian's nginx as the service.
//   - Without the PROXY protocol, X-Forwarded-For and X-Real-IP carry the
//     visitor as Caddy saw it, whatever the visitor sent in them.
//   - With proxy_protocol "v2" (then "v1"), nginx reads the header the
//     daemon's visitor hop wrote: its answer and its log name the
//     visitor's namespace address, not 127.0.0.1, and a forged
//     X-Tunnelsvc-Visitor changes nothing.
func TestVisitorAddressThroughHTTPTunnels(t *testing.T) {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Skip("caddy is not installed (scripts/install-deps.sh installs it)")
	}
	testutil.NeedNetnsTools(t, map[string]string{"ip": "iproute2", "curl": "curl"})
	plainPort, ppPort := testutil.FreePort(t), testutil.FreePort(t)
	nginx := testutil.StartNginx(t, "", testutil.NginxPort{Port: plainPort}, testutil.NginxPort{Port: ppPort, ProxyProtocol: true})
	w := newSite(t, "plain", map[string]any{"local_port": plainPort})
	var pp struct {
		ID         int64 `json:"id"`
		RemotePort int   `json:"remote_port"`
	}
	nas := fmt.Sprint(w.machine)
	if code, body := w.c.Call("POST", "/api/tunnels", map[string]any{"machine_id": w.machine, "name": "shop", "kind": "http",
		"subdomain": "shop", "local_port": ppPort, "proxy_protocol": "v2"}, &pp); code != 201 {
		t.Fatalf("create the PROXY protocol site: %d %s", code, body)
	}
	// The hop takes the site's port once the edge's reconcile ran.
	hop := net.JoinHostPort(webproxy.HopHost, fmt.Sprint(pp.RemotePort))
	took := testutil.Eventually(t, 45*time.Second, "the visitor hop listening at "+hop, func() error {
		c, err := net.Dial("tcp", hop)
		if err == nil {
			c.Close()
		}
		return err
	})
	t.Logf("the visitor hop took the new site's port %v after its creation", took.Round(time.Millisecond))
	var conf string
	if code, _ := w.c.Call("GET", "/api/machines/"+nas+"/revtunnel-client", nil, &conf); code != 200 {
		t.Fatalf("client config: %d %s", code, conf)
	}
	w.d.RunFRPC(t, "nas", conf, 0) // the machine takes its new tunnel
	testutil.WaitListening(t, pp.RemotePort, 15*time.Second)

	caddyPort := testutil.FreePort(t)
	file := daemonCaddyfile(t, w.d, func(in *webproxy.Input) { in.PlainHTTPPort, in.WSS = caddyPort, nil })
	caddyfile := filepath.Join(w.d.Dir, "Caddyfile")
	os.WriteFile(caddyfile, file, 0o644)
	t.Setenv("XDG_DATA_HOME", w.d.Dir)
	t.Setenv("XDG_CONFIG_HOME", w.d.Dir)
	testutil.Start(t, "caddy", "caddy", "run", "--config", caddyfile, "--adapter", "caddyfile")
	testutil.WaitListening(t, caddyPort, 10*time.Second)

	v := testutil.NewVisitor(t)
	get := func(host string, headers ...string) string {
		t.Helper()
		args := []string{"-H", "Host: " + host}
		for _, h := range headers {
			args = append(args, "-H", h)
		}
		out, err := v.Curl(append(args, fmt.Sprintf("http://%s:%d/", v.HostAddr, caddyPort))...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	forged := []string{"X-Forwarded-For: 203.0.113.66", "X-Real-IP: 203.0.113.66", webproxy.VisitorHeader + ": 203.0.113.66:1"}
	want := fmt.Sprintf("pp= remote=127.0.0.1 xff=%[1]s real=%[1]s", v.Addr)
	for _, h := range [][]string{nil, forged} {
		if got := get("plain.example.test", h...); got != want {
			t.Fatalf("without the PROXY protocol, sending %q, nginx saw %q, want %q", h, got, want)
		}
	}
	want = fmt.Sprintf("pp=%[1]s remote=%[1]s xff=%[1]s real=%[1]s", v.Addr)
	for _, h := range [][]string{nil, forged} {
		if got := get("shop.example.test", h...); got != want {
			t.Fatalf("with PROXY protocol v2, sending %q, nginx saw %q, want %q", h, got, want)
		}
	}
	logged := nginx.Logged(t)
	if strings.Count(logged, "pp="+v.Addr+" ") != 2 || strings.Contains(logged, "pp=127.0.0.1") || strings.Contains(logged, "203.0.113.66") {
		t.Fatalf("nginx's log:\n%s", logged)
	}
	// Version 1: the hop starts the port afresh with the new header.
	if code, body := w.c.Call("PATCH", fmt.Sprintf("/api/tunnels/%d", pp.ID), map[string]any{"proxy_protocol": "v1"}, nil); code != 200 {
		t.Fatalf("to v1: %d %s", code, body)
	}
	testutil.Eventually(t, 45*time.Second, "the hop writing v1", func() error {
		if got := w.d.App.Hop.Ports()[pp.RemotePort]; got != "v1" {
			return fmt.Errorf("the hop writes %q", got)
		}
		return nil
	})
	if got := get("shop.example.test"); got != want {
		t.Fatalf("with PROXY protocol v1, nginx saw %q, want %q", got, want)
	}
}

// TestFailoverAndFallback: a site served by two machines through real
// Caddy (the daemon's Caddyfile), frps and two frpc. Visitors ask every
// 10 ms. When the first machine's frpc is killed, the next answers come
// from the second machine, and its target shows down on the tunnel at
// once (frps's CloseProxy, through the plugin), not at the health check's
// next turn a minute later; when the second's is killed too, visitors get
// the tunnel's fallback page: 503, the operator's message, Retry-After, on
// the site's own name. It logs both times.
func TestFailoverAndFallback(t *testing.T) {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Skip("caddy is not installed (scripts/install-deps.sh installs it)")
	}
	origin := func(name string) int {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, name) }))
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().(*net.TCPAddr).Port
	}
	portA, portB := origin("A"), origin("B")
	w := newSite(t, "shop", map[string]any{"local_port": portA})
	standby := w.d.Join(t, w.c, "standby")
	const message = "The shop is being restocked. Back at 14:00."
	var tun machines.Tunnel
	if code, body := w.c.Call("PATCH", fmt.Sprintf("/api/tunnels/%d", w.tunnel), map[string]any{
		"targets":  []map[string]any{{"machine_id": w.machine, "local_port": portA}, {"machine_id": standby.ID, "local_port": portB}},
		"balance":  "failover",
		"health":   map[string]any{"path": "/", "interval_s": 60},
		"fallback": map[string]any{"message": message},
	}, &tun); code != 200 || tun.Fallback == nil || tun.Fallback.Message != message {
		t.Fatalf("two machines and a fallback: %d %s", code, body)
	}
	var conf string
	if code, body := w.c.Call("GET", fmt.Sprintf("/api/machines/%d/revtunnel-client", standby.ID), nil, &conf); code != 200 {
		t.Fatalf("standby's client config: %d %s", code, body)
	}
	standbyFRPC := w.d.RunFRPC(t, "standby", conf, 0)
	testutil.WaitListening(t, tun.Targets[1].RemotePort, 15*time.Second)

	caddyPort := testutil.FreePort(t)
	file := daemonCaddyfile(t, w.d, func(in *webproxy.Input) { in.PlainHTTPPort, in.WSS = caddyPort, nil })
	testutil.StartCaddy(t, file, caddyPort)
	client := &http.Client{Timeout: 10 * time.Second}
	get := func() (int, string, http.Header) {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/", caddyPort), nil)
		req.Host = "shop.example.test"
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error(), nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	testutil.Eventually(t, 15*time.Second, "the first machine answering through Caddy", func() error {
		if code, body, _ := get(); code != 200 || body != "A" {
			return fmt.Errorf("%d %q", code, body)
		}
		return nil
	})
	targetState := func(i int) string {
		var now machines.Tunnel
		w.c.Call("GET", fmt.Sprintf("/api/tunnels/%d", w.tunnel), nil, &now)
		if len(now.Targets) <= i {
			return ""
		}
		return now.Targets[i].Health.State
	}
	testutil.Eventually(t, 15*time.Second, "both targets checked up", func() error {
		if a, b := targetState(0), targetState(1); a != "up" || b != "up" {
			return fmt.Errorf("%s %s", a, b)
		}
		return nil
	})

	// Until the second machine answers: every visitor's request is
	// answered, by one machine or the other.
	killed := time.Now()
	w.frpc.Stop()
	failover, failed, _, _ := untilAnswer(t, get, killed, "the second machine", func(code int, body string) (bool, bool) {
		return code == 200 && body == "B", code != 200
	})
	if failed > 0 {
		t.Fatalf("%d visitor requests failed while the first machine went away: a GET is retried on the other", failed)
	}
	down := testutil.Eventually(t, 20*time.Second, "the first machine's target down on the tunnel", func() error {
		if s := targetState(0); s != "down" {
			return fmt.Errorf("state %q", s)
		}
		return nil
	})
	t.Logf("frpc killed: the second machine answered %v later, no visitor request failing; the target showed down %v after that (its health check's interval is 60 s)",
		failover.Round(time.Millisecond), down.Round(time.Millisecond))

	// Until the fallback page: every request answered by the second
	// machine, then the page.
	killed = time.Now()
	standbyFRPC.Stop()
	fallback, failed, body, header := untilAnswer(t, get, killed, "the fallback page", func(code int, body string) (bool, bool) {
		return code == http.StatusServiceUnavailable, code != 200
	})
	if failed > 0 {
		t.Fatalf("%d visitor requests failed while the last machine went away", failed)
	}
	if !strings.Contains(body, message) || !strings.Contains(body, "shop.example.test is unavailable") ||
		header.Get("Retry-After") != "30" || !strings.HasPrefix(header.Get("Content-Type"), "text/html") {
		t.Fatalf("the fallback page: %v %q", header, body)
	}
	t.Logf("the last frpc killed: the fallback page came %v later", fallback.Round(time.Millisecond))
}

// untilAnswer asks get every 10 ms from since until done says the answer
// is the one awaited (at most 30 s), and returns how long that took, how
// many answers were failures meanwhile, and the awaited answer.
func untilAnswer(t *testing.T, get func() (int, string, http.Header), since time.Time, what string,
	done func(code int, body string) (ok, failure bool)) (time.Duration, int, string, http.Header) {
	t.Helper()
	failed := 0
	for deadline := since.Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		code, body, header := get()
		ok, failure := done(code, body)
		if ok {
			return time.Since(since), failed, body, header
		}
		if failure {
			failed++
		}
	}
	t.Fatalf("%s: not within 30 s", what)
	return 0, 0, "", nil
}
