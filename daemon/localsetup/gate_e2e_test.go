package localsetup_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/api"
	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/logstream"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

// seen is what the machine's app reports about the request it received.
type seen struct {
	Path   string   `json:"path"`
	Cookie []string `json:"cookie"`
	User   []string `json:"user"`
}

// gateBed is a real caddy in front of real frps and frpc and a machine's
// app that echoes what it receives, with the daemon's gate and dashboard
// API on loopback.
type gateBed struct {
	t         *testing.T
	svc       *machines.Service
	auth      *auth.Service
	log       *testutil.SyncBuffer
	caddyPort int
	tunnels   map[string]machines.Tunnel
	// dash is the dashboard API's base URL.
	dash string
}

type answer struct {
	status int
	header http.Header
	body   string
}

// do sends one request to caddy for host, from the source address from
// (127.0.0.1 when empty), never following redirects.
func (b *gateBed) do(from, method, host, path string, hdr map[string]string, form url.Values) answer {
	b.t.Helper()
	if from == "" {
		from = "127.0.0.1"
	}
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", b.caddyPort, path), body)
	req.Host = fmt.Sprintf("%s:%d", host, b.caddyPort)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c := &http.Client{
		Timeout:       10 * time.Second,
		Transport:     &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s%s from %s: %v", method, host, path, from, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(raw)}
}

// app decodes what the machine's app saw, failing when it was not reached.
func (a answer) app(t *testing.T) seen {
	t.Helper()
	var s seen
	if a.status != 200 || json.Unmarshal([]byte(a.body), &s) != nil || s.Path == "" {
		t.Fatalf("the app was not reached: %d %q", a.status, a.body)
	}
	return s
}

func (a answer) reachedApp() bool { return strings.Contains(a.body, `"path":`) }

// gateCookie returns the gate cookie set by a, checking its attributes.
func (a answer) gateCookie(t *testing.T) string {
	t.Helper()
	for _, c := range (&http.Response{Header: a.header}).Cookies() {
		if c.Name == gate.CookieName && c.Value != "" {
			if !c.HttpOnly || c.Domain != "" || c.Path != "/" || c.SameSite != http.SameSiteLaxMode {
				t.Fatalf("gate cookie attributes: %+v", c)
			}
			return c.Value
		}
	}
	t.Fatalf("no gate cookie set: %d %v %q", a.status, a.header, a.body)
	return ""
}

func newGateBed(t *testing.T) *gateBed { return newGateBedOn(t, "") }

// newGateBedOn is newGateBed with its state in the database at
// databaseURL ("" for SQLite in its data directory).
func newGateBedOn(t *testing.T, databaseURL string) *gateBed {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Fatal("caddy is not installed (scripts/install-deps.sh installs it)")
	}
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.OpenDatabase(ctx, filepath.Join(dir, "data"), databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	logBuf := &testutil.SyncBuffer{}
	log := slog.New(slog.NewTextHandler(logBuf, nil))

	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(seen{Path: r.URL.RequestURI(), Cookie: r.Header.Values("Cookie"), User: r.Header.Values("X-Forwarded-User")})
	}))
	t.Cleanup(web.Close)
	webPort := web.Listener.Addr().(*net.TCPAddr).Port

	ts := startTunnelServer(t, ctx, st, dir, log)
	svc := ts.svc
	b := &gateBed{t: t, svc: svc, log: logBuf, tunnels: map[string]machines.Tunnel{}}
	str := func(s string) *string { return &s }
	for _, c := range []struct {
		sub    string
		access string
		pw     string
		allow  []string
	}{
		{"open", "public", "", nil},
		{"lan", "public", "", []string{"127.0.0.2", "10.0.0.0/8"}},
		{"pw", "password", "correct horse battery staple", nil},
		{"op", "operator", "", nil},
		{"oplan", "operator", "", []string{"127.0.0.2/32"}},
	} {
		in := machines.TunnelInput{MachineID: &ts.machineID, Name: str(c.sub), Kind: str("http"), LocalPort: &webPort,
			Subdomain: str(c.sub), Access: str(c.access)}
		if c.pw != "" {
			in.Password = str(c.pw)
		}
		if c.allow != nil {
			in.AllowIPs = &c.allow
		}
		tun, err := svc.CreateTunnel(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		b.tunnels[c.sub] = tun
	}
	var tunnelPorts []int
	for _, tun := range b.tunnels {
		tunnelPorts = append(tunnelPorts, tun.RemotePort)
	}
	ts.runClient(t, ctx, tunnelPorts...)

	// The daemon's parts: the dashboard API (for operator sign-in) and the
	// gate, sharing the login rate limit and the audit log.
	rec := &audit.Recorder{Store: st, Log: log, Now: time.Now}
	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	b.auth = &auth.Service{Store: st, Log: log, Audit: rec, DataDir: cfg.DataDir, Now: time.Now,
		Sessions: &auth.Sessions{Store: st, Now: time.Now}, Limiter: auth.NewLimiter(nil)}
	settings := localsetup.Settings{Store: st}
	g := gate.New(gate.Options{Store: st, Domain: settings.Domain, Limiter: b.auth.Limiter, Audit: rec, Log: log})
	svc.OnChange = func(int64) {
		if err := g.Reload(ctx); err != nil {
			t.Errorf("gate reload: %v", err)
		}
	}
	gateSrv := httptest.NewServer(g.Handler())
	t.Cleanup(gateSrv.Close)
	dash := httptest.NewServer(api.New(api.Options{Config: &cfg, Auth: b.auth, Audit: rec, Machines: svc, Reach: svc.Reach, Gate: g, Log: log}))
	t.Cleanup(dash.Close)
	b.dash = dash.URL

	setup := &localsetup.Service{
		Settings:  settings,
		Proxy:     &webproxy.Deployer{Path: filepath.Join(dir, "root/etc/tunnelsvc/Caddyfile"), Run: cmdrun.Exec{}, Units: activeUnits{}},
		Units:     activeUnits{},
		Tunnels:   localsetup.StoreTunnels{Store: st},
		Hub:       logstream.NewHub(nil),
		Dashboard: func() string { return strings.TrimPrefix(dash.URL, "http://") },
		Gate:      strings.TrimPrefix(gateSrv.URL, "http://"),
		Run:       cmdrun.Exec{}, Log: log, Now: time.Now,
	}
	if err := setup.Skip(ctx, "example.test"); err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	b.caddyPort = testutil.FreePort(t)
	in, ok, err := setup.ProxyInput(ctx)
	if err != nil || !ok {
		t.Fatalf("proxy input: %v %v", ok, err)
	}
	in.PlainHTTPPort, in.Admin = b.caddyPort, "off"
	file, err := webproxy.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := setup.Proxy.Validate(ctx, file); err != nil {
		t.Fatalf("caddy refused the rendered file: %v\n%s", err, file)
	}
	caddyfile := filepath.Join(dir, "Caddyfile")
	os.WriteFile(caddyfile, file, 0o644)
	t.Setenv("XDG_DATA_HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir)
	testutil.Start(t, "caddy", "caddy", "run", "--config", caddyfile, "--adapter", "caddyfile")
	testutil.WaitListening(t, b.caddyPort, 10*time.Second)
	return b
}

func TestGateThroughRealProxy(t *testing.T) {
	b := newGateBed(t)
	spoof := map[string]string{"X-Forwarded-User": "operator", "Cookie": "theme=dark; tunnelsvc_gate=forged"}

	t.Run("public", func(t *testing.T) {
		got := b.do("", "GET", "open.example.test", "/a?b=1", spoof, nil).app(t)
		if got.Path != "/a?b=1" || len(got.User) != 0 {
			t.Fatalf("app saw %+v: a client's X-Forwarded-User must not reach it", got)
		}
	})

	t.Run("allow_ips", func(t *testing.T) {
		if got := b.do("127.0.0.2", "GET", "lan.example.test", "/", spoof, nil).app(t); len(got.User) != 0 {
			t.Fatalf("app saw %+v", got)
		}
		for _, hdr := range []map[string]string{nil, {"X-Forwarded-For": "127.0.0.2"}, {"X-Real-IP": "127.0.0.2", "Forwarded": "for=127.0.0.2"}} {
			a := b.do("127.0.0.1", "GET", "lan.example.test", "/", hdr, nil)
			if a.status != http.StatusForbidden || a.reachedApp() || !strings.Contains(a.body, "127.0.0.1") {
				t.Fatalf("from a refused address with %v: %d %q", hdr, a.status, a.body)
			}
		}
		// Combined with operator: the address list applies before sign-in.
		if a := b.do("127.0.0.1", "GET", "oplan.example.test", "/.tunnelsvc/login", nil, nil); a.status != http.StatusForbidden {
			t.Fatalf("operator gate from a refused address: %d %q", a.status, a.body)
		}
		if a := b.do("127.0.0.2", "GET", "oplan.example.test", "/", nil, nil); a.status != http.StatusFound || a.reachedApp() {
			t.Fatalf("operator gate from an allowed address without sign-in: %d %q", a.status, a.body)
		}
	})

	t.Run("password", func(t *testing.T) {
		a := b.do("", "GET", "pw.example.test", "/docs/?x=1", spoof, nil)
		if a.status != http.StatusFound || a.reachedApp() || a.header.Get("Location") != "/.tunnelsvc/login?next=%2Fdocs%2F%3Fx%3D1" {
			t.Fatalf("without a session: %d %v %q", a.status, a.header, a.body)
		}
		if a := b.do("", "POST", "pw.example.test", "/api", nil, url.Values{"x": {"1"}}); a.status != http.StatusUnauthorized || a.reachedApp() {
			t.Fatalf("POST without a session: %d %q", a.status, a.body)
		}
		if a := b.do("", "GET", "pw.example.test", "/.tunnelsvc/login?next=/docs/", nil, nil); a.status != 200 || !strings.Contains(a.body, `type="password"`) {
			t.Fatalf("login page: %d %q", a.status, a.body)
		}
		a = b.do("", "POST", "pw.example.test", "/.tunnelsvc/login", nil, url.Values{"password": {"wrong password here"}, "next": {"/docs/"}})
		if a.status != http.StatusUnauthorized || a.header.Get("Set-Cookie") != "" {
			t.Fatalf("wrong password: %d %v", a.status, a.header)
		}
		if !strings.Contains(b.log.String(), "auth failure from 127.0.0.1") {
			t.Fatalf("no ban-tool line for a failed gate login:\n%s", b.log.String())
		}
		a = b.do("", "POST", "pw.example.test", "/.tunnelsvc/login", nil, url.Values{"password": {"correct horse battery staple"}, "next": {"/docs/"}})
		if a.status != http.StatusSeeOther || a.header.Get("Location") != "/docs/" {
			t.Fatalf("right password: %d %v %q", a.status, a.header, a.body)
		}
		cookie := a.gateCookie(t)
		with := map[string]string{"Cookie": "theme=dark; " + gate.CookieName + "=" + cookie + "; lang=en", "X-Forwarded-User": "operator"}
		got := b.do("", "GET", "pw.example.test", "/docs/", with, nil).app(t)
		if strings.Join(got.Cookie, "|") != "theme=dark; lang=en" || len(got.User) != 0 {
			t.Fatalf("app saw %+v: the gate cookie and any X-Forwarded-User must be stripped", got)
		}
		// With only the gate's cookie, the app gets no Cookie header at all.
		if got := b.do("", "GET", "pw.example.test", "/", map[string]string{"Cookie": gate.CookieName + "=" + cookie}, nil).app(t); len(got.Cookie) != 0 {
			t.Fatalf("app saw a Cookie header: %+v", got)
		}
		// A session is for its own tunnel only.
		if a := b.do("", "GET", "op.example.test", "/", map[string]string{"Cookie": gate.CookieName + "=" + cookie}, nil); a.reachedApp() {
			t.Fatal("a password-gate session opened an operator tunnel")
		}
		// Logout ends the session on the server, not only in the browser.
		a = b.do("", "POST", "pw.example.test", "/.tunnelsvc/logout", map[string]string{"Cookie": gate.CookieName + "=" + cookie}, url.Values{})
		if a.status != 200 || !strings.Contains(a.header.Get("Set-Cookie"), gate.CookieName+"=;") {
			t.Fatalf("logout: %d %v", a.status, a.header)
		}
		if a := b.do("", "GET", "pw.example.test", "/", map[string]string{"Cookie": gate.CookieName + "=" + cookie}, nil); a.status != http.StatusFound {
			t.Fatalf("after logout: %d %q", a.status, a.body)
		}
		// A new password ends every session of the tunnel at once.
		a = b.do("", "POST", "pw.example.test", "/.tunnelsvc/login", nil, url.Values{"password": {"correct horse battery staple"}})
		cookie = a.gateCookie(t)
		if a := b.do("", "GET", "pw.example.test", "/", map[string]string{"Cookie": gate.CookieName + "=" + cookie}, nil); !a.reachedApp() {
			t.Fatalf("signed in again: %d %q", a.status, a.body)
		}
		newPW := "another stapled battery horse"
		if _, err := b.svc.UpdateTunnel(context.Background(), b.tunnels["pw"].ID, machines.TunnelInput{Password: &newPW}); err != nil {
			t.Fatal(err)
		}
		if a := b.do("", "GET", "pw.example.test", "/", map[string]string{"Cookie": gate.CookieName + "=" + cookie}, nil); a.status != http.StatusFound || a.reachedApp() {
			t.Fatalf("a session outlived a password change: %d %q", a.status, a.body)
		}
	})

	t.Run("operator", func(t *testing.T) {
		a := b.do("", "GET", "op.example.test", "/grafana/?d=1", spoof, nil)
		if a.status != http.StatusFound || a.reachedApp() {
			t.Fatalf("without a session: %d %q", a.status, a.body)
		}
		a = b.do("", "GET", "op.example.test", a.header.Get("Location"), nil, nil)
		loc, err := url.Parse(a.header.Get("Location"))
		if a.status != http.StatusFound || err != nil || loc.Host != fmt.Sprintf("router.example.test:%d", b.caddyPort) || loc.Path != gate.AuthorizePath ||
			loc.Query().Get("host") != "op.example.test" || loc.Query().Get("next") != "/grafana/?d=1" {
			t.Fatalf("login page of an operator gate: %d %v", a.status, a.header)
		}
		// Not signed in to the dashboard: told to sign in, no code.
		a = b.do("", "GET", "router.example.test", loc.RequestURI(), nil, nil)
		if a.status != 200 || !strings.Contains(a.body, "Sign in first") || a.header.Get("Location") != "" {
			t.Fatalf("authorize without a dashboard session: %d %v %q", a.status, a.header, a.body)
		}
		token, err := b.auth.Sessions.Create(context.Background(), "127.0.0.1", "test")
		if err != nil {
			t.Fatal(err)
		}
		dashCookie := map[string]string{"Cookie": api.SessionCookie + "=" + token}
		// Only operator tunnels get codes.
		for _, host := range []string{"pw.example.test", "open.example.test", "evil.test", ""} {
			if a := b.do("", "GET", "router.example.test", gate.AuthorizePath+"?host="+url.QueryEscape(host), dashCookie, nil); a.status != http.StatusBadRequest {
				t.Fatalf("authorize for %q: %d %v", host, a.status, a.header)
			}
		}
		a = b.do("", "GET", "router.example.test", loc.RequestURI(), dashCookie, nil)
		cb, err := url.Parse(a.header.Get("Location"))
		if a.status != http.StatusFound || err != nil || cb.Host != fmt.Sprintf("op.example.test:%d", b.caddyPort) || cb.Path != gate.Prefix+"callback" {
			t.Fatalf("authorize: %d %v", a.status, a.header)
		}
		// A code works only on its own host (and is spent by trying).
		other := b.do("", "GET", "router.example.test", loc.RequestURI(), dashCookie, nil)
		otherCB, _ := url.Parse(other.header.Get("Location"))
		if a := b.do("127.0.0.2", "GET", "oplan.example.test", otherCB.RequestURI(), nil, nil); a.status != http.StatusUnauthorized || a.header.Get("Set-Cookie") != "" {
			t.Fatalf("code on another host: %d %v", a.status, a.header)
		}
		if a := b.do("", "GET", "op.example.test", otherCB.RequestURI(), nil, nil); a.status != http.StatusUnauthorized {
			t.Fatalf("a code tried on another host still worked: %d", a.status)
		}
		a = b.do("", "GET", "op.example.test", cb.RequestURI(), nil, nil)
		if a.status != http.StatusSeeOther || a.header.Get("Location") != "/grafana/?d=1" {
			t.Fatalf("callback: %d %v %q", a.status, a.header, a.body)
		}
		cookie := a.gateCookie(t)
		if a := b.do("", "GET", "op.example.test", cb.RequestURI(), nil, nil); a.status != http.StatusUnauthorized {
			t.Fatalf("a code used twice: %d", a.status)
		}
		got := b.do("", "GET", "op.example.test", "/grafana/?d=1", map[string]string{
			"Cookie": gate.CookieName + "=" + cookie + "; sid=app", "X-Forwarded-User": "admin"}, nil).app(t)
		if got.Path != "/grafana/?d=1" || strings.Join(got.User, "|") != "operator" || strings.Join(got.Cookie, "|") != "sid=app" {
			t.Fatalf("app saw %+v, want X-Forwarded-User: operator only and its own cookie", got)
		}
		// Switching the tunnel to password mode ends the operator sessions.
		pw, access := "a different shared passphrase", "password"
		if _, err := b.svc.UpdateTunnel(context.Background(), b.tunnels["op"].ID, machines.TunnelInput{Access: &access, Password: &pw}); err != nil {
			t.Fatal(err)
		}
		if a := b.do("", "GET", "op.example.test", "/", map[string]string{"Cookie": gate.CookieName + "=" + cookie}, nil); a.reachedApp() {
			t.Fatalf("an operator session outlived the access change: %d %q", a.status, a.body)
		}
	})

	// Every tunnel's site asks the gate, public ones too: a change of access
	// holds at once, with no Caddy reload (this Caddy never reloads).
	t.Run("no reload needed", func(t *testing.T) {
		ctx := context.Background()
		pw, access := "open sesame for the open site", "password"
		if _, err := b.svc.UpdateTunnel(ctx, b.tunnels["open"].ID, machines.TunnelInput{Access: &access, Password: &pw}); err != nil {
			t.Fatal(err)
		}
		if a := b.do("", "GET", "open.example.test", "/", nil, nil); a.status != http.StatusFound || a.reachedApp() {
			t.Fatalf("public → password: %d %q", a.status, a.body)
		}
		ips := []string{"192.0.2.0/24"}
		access = "public"
		if _, err := b.svc.UpdateTunnel(ctx, b.tunnels["open"].ID, machines.TunnelInput{Access: &access, AllowIPs: &ips}); err != nil {
			t.Fatal(err)
		}
		if a := b.do("", "GET", "open.example.test", "/", nil, nil); a.status != http.StatusForbidden || a.reachedApp() {
			t.Fatalf("public with an address list: %d %q", a.status, a.body)
		}
		ips = nil
		if _, err := b.svc.UpdateTunnel(ctx, b.tunnels["open"].ID, machines.TunnelInput{AllowIPs: &ips}); err != nil {
			t.Fatal(err)
		}
		b.do("", "GET", "open.example.test", "/", nil, nil).app(t)
	})

	t.Run("rate limit", func(t *testing.T) {
		var last answer
		for i := 0; i <= auth.MaxFailures; i++ {
			last = b.do("127.0.0.3", "POST", "pw.example.test", "/.tunnelsvc/login", nil, url.Values{"password": {fmt.Sprintf("wrong guess %d", i)}})
		}
		if last.status != http.StatusTooManyRequests || last.header.Get("Retry-After") == "" {
			t.Fatalf("after %d failures: %d %v", auth.MaxFailures+1, last.status, last.header)
		}
		if !strings.Contains(b.log.String(), "auth failure from 127.0.0.3") {
			t.Fatal("no ban-tool line for 127.0.0.3")
		}
		// The budget is the dashboard's: that address is locked out there too.
		if ok, _ := b.auth.Limiter.Check(netip.MustParseAddr("127.0.0.3")); ok {
			t.Fatal("gate failures did not count against the dashboard login")
		}
	})
}
