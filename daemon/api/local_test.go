package api

import (
	"context"
	"encoding/json"
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

	"github.com/gorilla/websocket"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/logstream"
	"github.com/tunnelsvc/tunnelsvc/daemon/netcheck"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// recUnits records unit calls; Start waits for gate when set and fails
// with startErr.
type recUnits struct {
	mu       sync.Mutex
	calls    []string
	active   map[string]bool
	gate     chan struct{}
	startErr error
}

var _ units.Manager = (*recUnits)(nil)

func (u *recUnits) rec(op, name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls = append(u.calls, op+" "+name)
}
func (u *recUnits) Calls() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return strings.Join(u.calls, ", ")
}
func (u *recUnits) Start(_ context.Context, n string) error {
	if u.gate != nil {
		<-u.gate
	}
	u.rec("start", n)
	if u.startErr != nil {
		return u.startErr
	}
	u.mu.Lock()
	u.active[n] = true
	u.mu.Unlock()
	return nil
}
func (u *recUnits) Stop(_ context.Context, n string) error    { u.rec("stop", n); return nil }
func (u *recUnits) Restart(_ context.Context, n string) error { u.rec("restart", n); return nil }
func (u *recUnits) Reload(_ context.Context, n string) error  { u.rec("reload", n); return nil }
func (u *recUnits) Enable(_ context.Context, n string) error  { u.rec("enable", n); return nil }
func (u *recUnits) Disable(_ context.Context, n string) error { u.rec("disable", n); return nil }
func (u *recUnits) State(_ context.Context, n string) (units.State, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.active[n] {
		return units.State{Name: n, ActiveState: "active", SubState: "running"}, nil
	}
	return units.State{Name: n, ActiveState: "inactive", SubState: "dead"}, nil
}

type localEnv struct {
	*testEnv
	units  *recUnits
	setup  *localsetup.Service
	root   string
	cookie string
}

func newLocalEnv(t *testing.T, net *netcheck.Checker) *localEnv {
	t.Helper()
	return newLocalEnvOn(t, sqliteEngine, net)
}

// newLocalEnvOn is newLocalEnv on a store of the given engine: the daemon
// as Serve builds it, its dashboard at 127.0.0.1:7380, systemd a recording
// stand-in, the tunnel server checked by the real frps.
func newLocalEnvOn(t *testing.T, engine string, checker *netcheck.Checker) *localEnv {
	t.Helper()
	frps, _ := testutil.FRP()
	dir := t.TempDir()
	u := &recUnits{active: map[string]bool{}}
	e := newEnvDeps(t, newTestDB(t, engine, dir), dir, func(c *config.Config) {
		c.BinDir = filepath.Dir(frps)
		// The network checks' DNS server and IP-echo services, as flags.
		if checker != nil {
			c.DNSServer, c.EchoURLs = checker.DNSServer, checker.EchoURLs
		}
	}, app.Deps{Units: u, Dashboard: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7380}})
	le := &localEnv{testEnv: e, units: u, setup: e.app.Setup, root: e.cfg.SystemRoot}
	le.cookie = e.setup()
	return le
}

func (le *localEnv) status(t *testing.T) localsetup.Status {
	t.Helper()
	r := le.do(req{method: "GET", path: "/api/local/status", cookie: le.cookie})
	if r.Code != 200 {
		t.Fatalf("status: %d %s", r.Code, r.Body)
	}
	var body struct{ Data localsetup.Status }
	json.Unmarshal(r.Body.Bytes(), &body)
	return body.Data
}

func TestLocalValidation(t *testing.T) {
	e := newLocalEnv(t, nil)
	cases := []struct {
		method, path, body string
		status             int
		msg                string
	}{
		{"POST", "/api/local/install", `{`, 400, "invalid request body"},
		{"POST", "/api/local/install", `{}`, 400, "domain is required"},
		{"POST", "/api/local/install", `{"skip_webproxy":true}`, 400, "server_host is required when skipping the proxy"},
		{"POST", "/api/local/install", `{"skip_webproxy":true,"domain":"example.com"}`, 400, "server_host is required when skipping the proxy"},
		{"POST", "/api/local/install", `{"domain":"bad_domain.com"}`, 400, "invalid domain"},
		{"POST", "/api/local/install", `{"domain":"example.com","server_host":"no such host!"}`, 400, "invalid server_host: give a hostname or an IP address"},
		{"POST", "/api/local/skip", `{"domain":"-bad-"}`, 400, "invalid domain"},
		{"PUT", "/api/local/server-ports", `{}`, 400, "dashboard_private is required"},
		{"PUT", "/api/local/server-ports", `{"dashboard_private":"yes"}`, 400, "invalid request body"},
		{"PUT", "/api/local/bind-ip", `{}`, 400, "bind_ip is required (an empty string clears it)"},
		{"PUT", "/api/local/bind-ip", `{"bind_ip":"example.com"}`, 400, "bind_ip must be an IP address (or empty to clear it)"},
		{"GET", "/api/local/resolve-ip", ``, 400, "host is required"},
		{"GET", "/api/local/resolve-ip?host=%20%20", ``, 400, "host is required"},
		{"GET", "/api/local/resolve-ip?host=bad_host", ``, 400, "invalid host"},
		{"GET", "/api/local/check-dns", ``, 400, "domain is required"},
		{"GET", "/api/local/check-dns?domain=a..b", ``, 400, "invalid domain"},
		{"GET", "/api/debug/webproxyfile", ``, 404, "no VPS or domain configured"},
	}
	for _, c := range cases {
		wantError(t, e.do(req{method: c.method, path: c.path, body: c.body, cookie: e.cookie}), c.status, c.msg)
	}
	st := e.status(t)
	if st.Domain != "" || st.BindIP != "" || st.DashboardPrivate || st.Webproxy != "not_installed" || e.units.Calls() != "" {
		t.Fatalf("a refused request changed something: %+v units=%s", st, e.units.Calls())
	}
	// Session rules: resolve-ip and the proxy file need one; check-dns and
	// detect-ip are public (spec §5.6).
	wantError(t, e.do(req{method: "GET", path: "/api/local/resolve-ip?host=1.2.3.4"}), 401, "authentication required")
	wantError(t, e.do(req{method: "GET", path: "/api/debug/webproxyfile"}), 401, "authentication required")
	wantError(t, e.do(req{method: "GET", path: "/api/local/status"}), 401, "authentication required")
	if r := e.do(req{method: "GET", path: "/api/local/check-dns"}); r.Code != 400 {
		t.Fatalf("check-dns without a session: %d", r.Code)
	}
}

func TestLocalSettings(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newLocalEnvOn(t, engine, nil)
		// An unparsable skip body is ignored (spec §4.2).
		if r := e.do(req{method: "POST", path: "/api/local/skip", body: `not json`, cookie: e.cookie}); r.Code != 200 {
			t.Fatalf("skip garbage: %d %s", r.Code, r.Body)
		}
		if r := e.do(req{method: "POST", path: "/api/local/skip", body: `{"domain":"Example.COM"}`, cookie: e.cookie}); r.Code != 200 {
			t.Fatalf("skip: %d %s", r.Code, r.Body)
		}
		r := e.do(req{method: "GET", path: "/api/debug/webproxyfile", cookie: e.cookie})
		if r.Code != 200 || r.Header().Get("Content-Type") != "text/plain; charset=utf-8" || !strings.Contains(r.Body.String(), "router.example.com {") {
			t.Fatalf("webproxyfile: %d %q %s", r.Code, r.Header().Get("Content-Type"), r.Body)
		}
		r = e.do(req{method: "PUT", path: "/api/local/server-ports", body: `{"dashboard_private":true}`, cookie: e.cookie})
		if r.Code != 200 || strings.TrimSpace(r.Body.String()) != `{"data":{"dashboard_private":true}}` {
			t.Fatalf("server-ports: %d %s", r.Code, r.Body)
		}
		r = e.do(req{method: "PUT", path: "/api/local/bind-ip", body: `{"bind_ip":" 203.0.113.5 "}`, cookie: e.cookie})
		if r.Code != 200 || r.json(t)["data"].(map[string]any)["bind_ip"] != "203.0.113.5" || !strings.Contains(r.Body.String(), "restart") {
			t.Fatalf("bind-ip: %d %s", r.Code, r.Body)
		}
		st := e.status(t)
		if st.Domain != "example.com" || !st.DashboardPrivate || st.BindIP != "203.0.113.5" || st.FirewallMode != "none" {
			t.Fatalf("status: %+v", st)
		}
		if !strings.Contains(e.do(req{method: "GET", path: "/api/debug/webproxyfile", cookie: e.cookie}).Body.String(), "default_bind 203.0.113.5") {
			t.Fatal("the proxy file does not bind to bind_ip")
		}
		if r := e.do(req{method: "PUT", path: "/api/local/bind-ip", body: `{"bind_ip":""}`, cookie: e.cookie}); r.Code != 200 || e.status(t).BindIP != "" {
			t.Fatalf("clearing bind-ip: %d %s", r.Code, r.Body)
		}
	})
}

func TestNetworkChecks(t *testing.T) {
	dns := testutil.DNSServer(t, map[string]string{"router.example.test.": "192.0.2.10", "nas.example.test.": "192.0.2.20"})
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("198.51.100.7")) }))
	defer echo.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("nope")) }))
	defer bad.Close()
	net := &netcheck.Checker{DNSServer: dns, EchoURLs: []string{bad.URL, echo.URL}}
	e := newLocalEnv(t, net)

	get := func(path string, auth bool) map[string]any {
		t.Helper()
		q := req{method: "GET", path: path}
		if auth {
			q.cookie = e.cookie
		}
		r := e.do(q)
		if r.Code != 200 {
			t.Fatalf("%s: %d %s", path, r.Code, r.Body)
		}
		return r.json(t)["data"].(map[string]any)
	}
	if d := get("/api/local/resolve-ip?host=%20nas.example.test%20", true); d["ip"] != "192.0.2.20" {
		t.Fatalf("resolve-ip: %v", d)
	}
	if d := get("/api/local/resolve-ip?host=2001:db8::1", true); d["ip"] != "2001:db8::1" {
		t.Fatalf("resolve-ip literal: %v", d)
	}
	if d := get("/api/local/resolve-ip?host=missing.example.test", true); d["ip"] != "" {
		t.Fatalf("resolve-ip missing: %v", d)
	}
	if d := get("/api/local/check-dns?domain=example.test", false); d["ok"] != true || d["resolved_to"] != "192.0.2.10" || d["host"] != "router.example.test" {
		t.Fatalf("check-dns: %v", d)
	}
	if d := get("/api/local/check-dns?domain=nowhere.test", false); d["ok"] != false || !strings.Contains(d["message"].(string), "router.nowhere.test does not resolve") {
		t.Fatalf("check-dns failure: %v", d)
	}
	if d := get("/api/local/detect-ip", false); d["ip"] != "198.51.100.7" {
		t.Fatalf("detect-ip: %v", d)
	}
	// A daemon whose only IP-echo service answers nonsense.
	e = newLocalEnv(t, &netcheck.Checker{DNSServer: dns, EchoURLs: []string{bad.URL}})
	wantError(t, e.do(req{method: "GET", path: "/api/local/detect-ip"}), 500, "could not detect public IP")
}

// readUntilDone reads WebSocket messages until a done message.
func readUntilDone(t *testing.T, c *websocket.Conn) (lines []string, ok bool) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		var m logstream.Message
		if err := c.ReadJSON(&m); err != nil {
			t.Fatalf("websocket read after %v: %v", lines, err)
		}
		if m.Done {
			if m.OK == nil {
				t.Fatal("done message without ok")
			}
			return lines, *m.OK
		}
		if m.Time == nil || m.Level == "" {
			t.Fatalf("line message without time or level: %+v", m)
		}
		lines = append(lines, m.Level+": "+m.Line)
	}
}

func dialLogs(t *testing.T, srv *httptest.Server, cookie string, origin string) (*websocket.Conn, *http.Response, error) {
	h := http.Header{"Cookie": {SessionCookie + "=" + cookie}}
	if origin != "" {
		h.Set("Origin", origin)
	}
	c, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/api/local/logs/ws", h)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, resp, err
}

func TestInstallStreamsToWebSocket(t *testing.T) {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Skip("caddy is not installed (scripts/install-deps.sh installs it)")
	}
	e := newLocalEnv(t, nil)
	e.units.gate = make(chan struct{})
	srv := httptest.NewServer(checkedHandler(t, e.srv))
	defer srv.Close()

	if _, resp, err := dialLogs(t, srv, "", ""); err == nil || resp.StatusCode != 401 {
		t.Fatalf("log socket without a session: %v", err)
	}
	if _, resp, err := dialLogs(t, srv, e.cookie, "https://evil.example"); err == nil || resp.StatusCode != 403 {
		t.Fatalf("log socket from another origin: %v", err)
	}
	ws, _, err := dialLogs(t, srv, e.cookie, srv.URL)
	if err != nil {
		t.Fatal(err)
	}

	post := func(body string) (int, string) {
		rq, _ := http.NewRequest("POST", srv.URL+"/api/local/install", strings.NewReader(body))
		rq.AddCookie(&http.Cookie{Name: SessionCookie, Value: e.cookie})
		resp, err := http.DefaultClient.Do(rq)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(`{"domain":"example.com"}`); code != 200 || !strings.Contains(body, "installation started") {
		t.Fatalf("install: %d %s", code, body)
	}
	// Starting caddy is held back: a second install meanwhile is refused.
	if code, body := post(`{"domain":"example.org"}`); code != 409 || !strings.Contains(body, "another operation is running") {
		t.Fatalf("second install: %d %s", code, body)
	}
	close(e.units.gate)
	lines, ok := readUntilDone(t, ws)
	if !ok {
		t.Fatalf("install failed: %v", lines)
	}
	all := strings.Join(lines, "\n")
	for _, want := range []string{
		`info: saving settings: domain "example.com", server host "router.example.com"`,
		"info: rendering the Caddyfile and checking it with caddy validate",
		"info: starting caddy.service", "info: caddy.service started",
		"info: starting revtunnel-server.service", "info: installation complete",
	} {
		if !strings.Contains(all, want) {
			t.Fatalf("streamed lines lack %q:\n%s", want, all)
		}
	}
	// The tunnel server's config is written (and frps restarted on it)
	// before its unit is enabled and started.
	if got := e.units.Calls(); got != "enable caddy.service, start caddy.service, restart revtunnel-server.service, enable revtunnel-server.service, start revtunnel-server.service" {
		t.Fatalf("unit calls: %s", got)
	}
	b, err := os.ReadFile(filepath.Join(e.root, "etc/tunnelsvc/Caddyfile"))
	if err != nil || !strings.Contains(string(b), "router.example.com {\n\treverse_proxy 127.0.0.1:7380\n}") {
		t.Fatalf("deployed Caddyfile: %v\n%s", err, b)
	}
	if st := e.status(t); st.Webproxy != "installed" || st.ServerHost != "router.example.com" || st.Units["caddy"].ActiveState != "active" {
		t.Fatalf("status after install: %+v", st)
	}
	// A watcher that connects afterwards gets the whole operation first.
	late, _, err := dialLogs(t, srv, e.cookie, "")
	if err != nil {
		t.Fatal(err)
	}
	if lateLines, ok := readUntilDone(t, late); !ok || strings.Join(lateLines, "\n") != all {
		t.Fatalf("late watcher got %v (ok=%v)", lateLines, ok)
	}
}

func TestInstallFailureIsReported(t *testing.T) {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Skip("caddy is not installed (scripts/install-deps.sh installs it)")
	}
	e := newLocalEnv(t, nil)
	e.units.startErr = &units.JobError{Op: "start", Unit: "caddy.service", Result: "failed"}
	srv := httptest.NewServer(checkedHandler(t, e.srv))
	defer srv.Close()
	ws, _, err := dialLogs(t, srv, e.cookie, "")
	if err != nil {
		t.Fatal(err)
	}
	if r := e.do(req{method: "POST", path: "/api/local/install", body: `{"domain":"example.com","server_host":"203.0.113.9"}`, cookie: e.cookie}); r.Code != 200 {
		t.Fatalf("install: %d %s", r.Code, r.Body)
	}
	lines, ok := readUntilDone(t, ws)
	if ok || !strings.Contains(strings.Join(lines, "\n"), "error: starting caddy.service: start caddy.service: job failed") {
		t.Fatalf("failure not reported: ok=%v %v", ok, lines)
	}
	if st := e.status(t); st.Webproxy != "not_installed" {
		t.Fatalf("a failed install is shown as %q", st.Webproxy)
	}
}

// The status names the database: SQLite's file, or PostgreSQL's URL as
// the set-up service was given it (redacted by the composition root).
func TestLocalStatusDatabase(t *testing.T) {
	le := newLocalEnv(t, nil)
	if got := le.status(t).Database; got != (localsetup.DatabaseStatus{Engine: "sqlite", Path: filepath.Join(le.cfg.DataDir, store.DBFile)}) {
		t.Fatalf("sqlite: %+v", got)
	}
	pg := localsetup.DatabaseStatus{Engine: "postgres", URL: "postgres://tunnelsvc:***@db.example.com/tunnelsvc?sslmode=verify-full"}
	le.setup.Database = pg
	if got := le.status(t).Database; got != pg {
		t.Fatalf("postgres: %+v", got)
	}
}
