package localsetup_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/api"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/daemontest"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

// seen is what the machine's app reports about the request it received.
type seen struct {
	Path   string   `json:"path"`
	Cookie []string `json:"cookie"`
	User   []string `json:"user"`
	// Auth and Token: the Authorization and X-Tunnel-Token headers.
	Auth  []string `json:"auth"`
	Token []string `json:"token"`
}

// gateBed is a real caddy, on the Caddyfile the daemon renders, in front
// of the whole daemon (its gate and dashboard on loopback), a real frps on
// the config the daemon wrote and a machine's frpc, with the machine's app
// echoing what it receives.
type gateBed struct {
	t *testing.T
	d *daemontest.Daemon
	// op is the operator, signed in to the dashboard.
	op        *daemontest.Client
	caddyPort int
	tunnels   map[string]machines.Tunnel
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

// newGateBedOn is newGateBed with the daemon's state in the database at
// databaseURL ("" for SQLite in its data directory).
func newGateBedOn(t *testing.T, databaseURL string) *gateBed {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Fatal("caddy is not installed (scripts/install-deps.sh installs it)")
	}
	d := daemontest.Start(t, daemontest.Options{Database: databaseURL})
	b := &gateBed{t: t, d: d, op: d.Setup(t), tunnels: map[string]machines.Tunnel{}}
	d.RunFRPS(t)

	// The machine's app.
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(seen{Path: r.URL.RequestURI(), Cookie: r.Header.Values("Cookie"), User: r.Header.Values("X-Forwarded-User"),
			Auth: r.Header.Values("Authorization"), Token: r.Header.Values(gate.TokenHeader)})
	}))
	t.Cleanup(web.Close)
	webPort := web.Listener.Addr().(*net.TCPAddr).Port

	// The operator sets the domain (the set-up page's "skip": no web proxy
	// installed by the daemon; this test runs its own Caddy), a machine
	// joins, and the operator gives it its tunnels.
	if code, body := b.op.Call("POST", "/api/local/skip", map[string]string{"domain": "example.test"}, nil); code != 200 {
		t.Fatalf("skip with a domain: %d %s", code, body)
	}
	m := d.Join(t, b.op, "nas")
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
		in := map[string]any{"machine_id": m.ID, "name": c.sub, "kind": "http", "local_port": webPort, "subdomain": c.sub, "access": c.access}
		if c.pw != "" {
			in["password"] = c.pw
		}
		if c.allow != nil {
			in["allow_ips"] = c.allow
		}
		var tun machines.Tunnel
		if code, body := b.op.Call("POST", "/api/tunnels", in, &tun); code != http.StatusCreated {
			t.Fatalf("create tunnel %s: %d %s", c.sub, code, body)
		}
		b.tunnels[c.sub] = tun
	}
	var conf string
	if code, body := b.op.Call("GET", fmt.Sprintf("/api/machines/%d/revtunnel-client", m.ID), nil, &conf); code != 200 {
		t.Fatalf("client config: %d %s", code, body)
	}
	d.RunFRPC(t, m.Name, conf, 0)
	for _, tun := range b.tunnels {
		testutil.WaitListening(t, tun.RemotePort, 10*time.Second)
	}

	// Caddy runs the Caddyfile the daemon renders (its dashboard's and its
	// gate's real addresses in it), served over plain HTTP on a port of
	// the test's, without the wss site, which needs automatic HTTPS.
	b.caddyPort = testutil.FreePort(t)
	file := daemonCaddyfile(t, d, func(in *webproxy.Input) {
		if in.Gate != d.Config.GateListen {
			t.Fatalf("the Caddyfile asks the gate at %q, the daemon's gate listens on %q", in.Gate, d.Config.GateListen)
		}
		in.PlainHTTPPort, in.WSS = b.caddyPort, nil
	})
	testutil.StartCaddy(t, file, b.caddyPort)
	return b
}

// update changes the tunnel called sub as the dashboard does.
func (b *gateBed) update(sub string, change map[string]any) {
	b.t.Helper()
	if code, body := b.op.Call("PATCH", fmt.Sprintf("/api/tunnels/%d", b.tunnels[sub].ID), change, nil); code != 200 {
		b.t.Fatalf("update tunnel %s with %v: %d %s", sub, change, code, body)
	}
}

// session is the operator's dashboard session token.
func (b *gateBed) session() string {
	b.t.Helper()
	u, _ := url.Parse(b.d.URL)
	for _, c := range b.op.HTTP.Jar.Cookies(u) {
		if c.Name == api.SessionCookie {
			return c.Value
		}
	}
	b.t.Fatal("the operator has no dashboard session")
	return ""
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
		if !strings.Contains(b.d.Log.String(), "auth failure from 127.0.0.1") {
			t.Fatalf("no ban-tool line for a failed gate login:\n%s", b.d.Log.String())
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
		b.update("pw", map[string]any{"password": "another stapled battery horse"})
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
		dashCookie := map[string]string{"Cookie": api.SessionCookie + "=" + b.session()}
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
		b.update("op", map[string]any{"access": "password", "password": "a different shared passphrase"})
		if a := b.do("", "GET", "op.example.test", "/", map[string]string{"Cookie": gate.CookieName + "=" + cookie}, nil); a.reachedApp() {
			t.Fatalf("an operator session outlived the access change: %d %q", a.status, a.body)
		}
	})

	// Every tunnel's site asks the gate, public ones too: a change of access
	// holds at once, with no Caddy reload (this Caddy never reloads).
	t.Run("no reload needed", func(t *testing.T) {
		b.update("open", map[string]any{"access": "password", "password": "open sesame for the open site"})
		if a := b.do("", "GET", "open.example.test", "/", nil, nil); a.status != http.StatusFound || a.reachedApp() {
			t.Fatalf("public → password: %d %q", a.status, a.body)
		}
		b.update("open", map[string]any{"access": "public", "allow_ips": []string{"192.0.2.0/24"}})
		if a := b.do("", "GET", "open.example.test", "/", nil, nil); a.status != http.StatusForbidden || a.reachedApp() {
			t.Fatalf("public with an address list: %d %q", a.status, a.body)
		}
		b.update("open", map[string]any{"allow_ips": []string{}})
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
		if !strings.Contains(b.d.Log.String(), "auth failure from 127.0.0.3") {
			t.Fatal("no ban-tool line for 127.0.0.3")
		}
		// The budget is the dashboard's: that address is locked out there too.
		if ok, _ := b.d.App.Auth.Limiter.Check(netip.MustParseAddr("127.0.0.3")); ok {
			t.Fatal("gate failures did not count against the dashboard login")
		}
	})

	// An app's client that follows no sign-in page (Go's http.Client, no
	// cookie jar, no JavaScript) gets past gates with a bypass token;
	// path rules open or close parts of a site; a remembered sign-in lasts
	// its days until the operator signs everyone out.
	t.Run("apps", func(t *testing.T) {
		const from = "127.0.0.5"
		path := fmt.Sprintf("/api/tunnels/%d/bypass-tokens", b.tunnels["op"].ID)
		var tok machines.BypassToken
		if code, body := b.op.Call("POST", path, map[string]any{"name": "ios-app", "expires_in_days": 30}, &tok); code != http.StatusCreated || tok.Token == "" {
			t.Fatalf("make a bypass token: %d %s", code, body)
		}
		for _, hdr := range []map[string]string{{"Authorization": "Bearer " + tok.Token}, {gate.TokenHeader: tok.Token}} {
			got := b.do(from, "POST", "op.example.test", "/api/sync", hdr, url.Values{"n": {"1"}}).app(t)
			if len(got.Auth) != 0 || len(got.Token) != 0 || strings.Join(got.User, "") != "token:ios-app" {
				t.Fatalf("with %v the app saw %+v: the token must not reach it, and it is named", hdr, got)
			}
		}
		if a := b.do(from, "GET", "op.example.test", "/", map[string]string{gate.TokenHeader: gate.TokenPrefix + "wrong"}, nil); a.status != http.StatusUnauthorized ||
			a.reachedApp() || !strings.Contains(a.body, "tunnel token is not valid") {
			t.Fatalf("a wrong token: %d %q", a.status, a.body)
		}
		var list []machines.BypassToken
		b.op.Call("GET", path, nil, &list)
		if len(list) != 1 || list[0].Name != "ios-app" || list[0].Token != "" {
			t.Fatalf("the list: %+v", list)
		}
		if code, body := b.op.Call("DELETE", fmt.Sprintf("%s/%d", path, list[0].ID), nil, nil); code != 200 {
			t.Fatalf("revoke: %d %s", code, body)
		}
		if a := b.do(from, "GET", "op.example.test", "/", map[string]string{"Authorization": "Bearer " + tok.Token}, nil); a.status != http.StatusUnauthorized || a.reachedApp() {
			t.Fatalf("a revoked token: %d %q", a.status, a.body)
		}

		// Path rules: the API open, /admin closed to everyone.
		b.update("pw", map[string]any{"rules": []map[string]string{{"path": "/admin*", "action": "deny"}, {"path": "/api/*", "action": "allow"}},
			"remember_days": 30})
		if got := b.do(from, "GET", "pw.example.test", "/api/items?x=1", nil, nil).app(t); got.Path != "/api/items?x=1" {
			t.Fatalf("an allowed path: %+v", got)
		}
		a := b.do(from, "POST", "pw.example.test", "/.tunnelsvc/login", nil, url.Values{"password": {"another stapled battery horse"}})
		cookie := a.gateCookie(t)
		if !strings.Contains(a.header.Get("Set-Cookie"), "Max-Age=2592000") {
			t.Fatalf("a sign-in remembered for 30 days: %v", a.header.Values("Set-Cookie"))
		}
		with := map[string]string{"Cookie": gate.CookieName + "=" + cookie, "Authorization": "Bearer the-app's-own"}
		if got := b.do(from, "GET", "pw.example.test", "/docs", with, nil).app(t); strings.Join(got.Auth, "") != "Bearer the-app's-own" {
			t.Fatalf("the app's own Authorization header must reach it: %+v", got)
		}
		if a := b.do(from, "GET", "pw.example.test", "/admin/users", with, nil); a.status != http.StatusForbidden || a.reachedApp() {
			t.Fatalf("a denied path, signed in: %d %q", a.status, a.body)
		}
		if code, body := b.op.Call("DELETE", fmt.Sprintf("/api/tunnels/%d/sessions", b.tunnels["pw"].ID), nil, nil); code != 200 {
			t.Fatalf("sign everyone out: %d %s", code, body)
		}
		if a := b.do(from, "GET", "pw.example.test", "/docs", with, nil); a.status != http.StatusFound || a.reachedApp() {
			t.Fatalf("a remembered sign-in after everyone was signed out: %d %q", a.status, a.body)
		}
	})
}
