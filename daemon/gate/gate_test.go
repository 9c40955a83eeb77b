package gate_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

type noKeys struct{}

func (noKeys) DefaultPublicKey(context.Context) (string, error) { return "ssh-ed25519 AAAA test", nil }

type env struct {
	st  *store.Store
	svc *machines.Service
	g   *gate.Gate
	h   http.Handler
	ids map[string]int64
}

// newEnv stores n tunnels (plus the named ones of spec) on a real store
// and loads them into a gate. spec maps subdomain to access; a "password"
// tunnel's password is "correct horse battery staple".
func newEnv(t testing.TB, n int, spec map[string]string) *env {
	t.Helper()
	return newEnvOn(t, "", n, spec)
}

// newEnvOn is newEnv on the PostgreSQL database at url ("" for SQLite).
func newEnvOn(t testing.TB, dbURL string, n int, spec map[string]string) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.OpenDatabase(ctx, dir, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sealer, _ := seal.LoadOrCreate(dir)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := &machines.Service{Store: st, Sealer: sealer, Keys: noKeys{}, Log: log, Limiter: auth.NewLimiter(nil),
		Ports: store.PortRange{Lo: 20000, Hi: 29999}, Reach: &reach.Resolver{}, FRPSPort: 7000}
	tok, err := svc.CreateToken(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := svc.Bootstrap(ctx, machines.BootstrapRequest{Token: tok.Token, Name: "m", Username: "u", Client: netip.MustParseAddr("127.0.0.1"), FallbackHost: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{st: st, svc: svc, ids: map[string]int64{}}
	str := func(s string) *string { return &s }
	port := 8080
	add := func(sub, access string) {
		in := machines.TunnelInput{MachineID: &reg.MachineID, Name: str(sub), Kind: str("http"), LocalPort: &port, Subdomain: str(sub), Access: str(access)}
		if access == gate.Password {
			in.Password = str("correct horse battery staple")
		}
		if access == gate.SSO {
			in.SSOAllow = &[]string{"ana@example.com", "@corp.example", "group:ops"}
		}
		tun, err := svc.CreateTunnel(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		e.ids[sub] = tun.ID
	}
	for i := 0; i < n; i++ {
		add(fmt.Sprintf("site-%d", i), []string{gate.Public, gate.Operator}[i%2])
	}
	for sub, access := range spec {
		add(sub, access)
	}
	e.g = gate.New(gate.Options{Store: st, Log: log, Domain: func(context.Context) (string, error) { return "example.com", nil }})
	svc.OnChange = func(int64) {
		if err := e.g.Reload(ctx); err != nil {
			t.Error(err)
		}
	}
	if err := e.g.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	e.h = e.g.Handler()
	return e
}

// check asks the gate as the proxy does.
func (e *env) check(host, cookie, from, uri string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", gate.CheckPath, nil)
	r.Host = host
	r.RemoteAddr = "127.0.0.1:50000"
	if cookie != "" {
		r.Header.Set("Cookie", cookie)
	}
	if from != "" {
		r.Header.Set("X-Forwarded-For", from)
	}
	r.Header.Set("X-Forwarded-Method", "GET")
	r.Header.Set("X-Forwarded-Uri", uri)
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

// signIn signs in to a password tunnel and returns the gate cookie.
func (e *env) signIn(t testing.TB, host string) string {
	t.Helper()
	r := httptest.NewRequest("POST", gate.Prefix+"login", strings.NewReader(url.Values{"password": {"correct horse battery staple"}}.Encode()))
	r.Host = host
	r.RemoteAddr = "127.0.0.1:50000"
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	for _, c := range w.Result().Cookies() {
		if c.Name == gate.CookieName {
			return c.Value
		}
	}
	t.Fatalf("sign-in at %s: %d %s", host, w.Code, w.Body)
	return ""
}

func TestCheck(t *testing.T) {
	e := newEnv(t, 0, map[string]string{"pw": gate.Password, "op": gate.Operator, "pub": gate.Public})
	if w := e.check("nope.example.com", "", "", "/"); w.Code != http.StatusForbidden {
		t.Fatalf("unknown host: %d", w.Code)
	}
	if w := e.check("pub.example.com:8443", "a=1", "", "/"); w.Code != 200 || w.Header().Get("Cookie") != "a=1" || w.Header().Get(gate.UserHeader) != "" {
		t.Fatalf("public: %d %v", w.Code, w.Header())
	}
	w := e.check("PW.Example.com.", "", "", "/x?y=1")
	if w.Code != http.StatusFound || w.Header().Get("Location") != "/.tunnelsvc/login?next=%2Fx%3Fy%3D1" {
		t.Fatalf("password without a session: %d %v", w.Code, w.Header())
	}
	// A next that leaves the host is replaced by /.
	if w := e.check("pw.example.com", "", "", "//evil.test/"); w.Header().Get("Location") != "/.tunnelsvc/login?next=%2F" {
		t.Fatalf("next: %v", w.Header())
	}
	c := e.signIn(t, "pw.example.com")
	if w := e.check("pw.example.com", "x=1; "+gate.CookieName+"=bogus; "+gate.CookieName+"="+c, "", "/"); w.Code != 200 || w.Header().Get("Cookie") != "x=1" {
		t.Fatalf("with a session among forged cookies: %d %v", w.Code, w.Header())
	}
	if w := e.check("op.example.com", gate.CookieName+"="+c, "", "/"); w.Code != http.StatusFound {
		t.Fatalf("a password session opened the operator tunnel: %d", w.Code)
	}
}

func TestReloadEndsSessions(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 0, map[string]string{"a": gate.Password, "b": gate.Password})
	ca, cb := e.signIn(t, "a.example.com"), e.signIn(t, "b.example.com")
	ok := func(host, c string) bool { return e.check(host, gate.CookieName+"="+c, "", "/").Code == 200 }
	if !ok("a.example.com", ca) || !ok("b.example.com", cb) {
		t.Fatal("fresh sessions refused")
	}
	// Changing the address list keeps sessions: it is applied to every request anyway.
	ips := []string{"127.0.0.0/8"}
	if _, err := e.svc.UpdateTunnel(ctx, e.ids["a"], machines.TunnelInput{AllowIPs: &ips}); err != nil {
		t.Fatal(err)
	}
	if !ok("a.example.com", ca) {
		t.Fatal("a session ended by an address-list change")
	}
	if w := e.check("a.example.com", gate.CookieName+"="+ca, "192.0.2.1", "/"); w.Code != http.StatusForbidden {
		t.Fatalf("a session let a refused address in: %d", w.Code)
	}
	op := "operator"
	if _, err := e.svc.UpdateTunnel(ctx, e.ids["a"], machines.TunnelInput{Access: &op}); err != nil {
		t.Fatal(err)
	}
	if ok("a.example.com", ca) {
		t.Fatal("a session outlived the access change")
	}
	if !ok("b.example.com", cb) {
		t.Fatal("another tunnel's session ended")
	}
	if err := e.svc.DeleteTunnel(ctx, e.ids["b"]); err != nil {
		t.Fatal(err)
	}
	if w := e.check("b.example.com", gate.CookieName+"="+cb, "", "/"); w.Code != http.StatusForbidden {
		t.Fatalf("deleted tunnel: %d", w.Code)
	}
}

func TestStripCookie(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{gate.CookieName + "=x"}, ""},
		{[]string{"a=1; " + gate.CookieName + "=x; b=2"}, "a=1; b=2"},
		{[]string{gate.CookieName + "=x;a=1", "b=2; " + gate.CookieName + "=y"}, "a=1; b=2"},
		{[]string{" " + gate.CookieName + " = x ; tunnelsvc_gatex=1"}, "tunnelsvc_gatex=1"},
		{[]string{";;a=1;;"}, "a=1"},
	} {
		if got := gate.StripCookie(c.in); got != c.want {
			t.Errorf("StripCookie(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"": "/", "/a?b=c#d": "/a?b=c#d", "//evil.test": "/", "/\\evil.test": "/", "https://evil.test": "/",
		"/a\r\nSet-Cookie: x": "/", "/.tunnelsvc/logout": "/", "/.tunnelsvc": "/", "evil": "/",
		"/" + strings.Repeat("a", 3000): "/",
	} {
		if got := gate.SafeNext(in); got != want {
			t.Errorf("SafeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseAllow(t *testing.T) {
	for in, want := range map[string]string{
		"10.1.2.3": "10.1.2.3/32", " 10.1.2.3/8 ": "10.0.0.0/8", "2001:db8::1": "2001:db8::1/128",
		"::ffff:10.0.0.1": "10.0.0.1/32", "::ffff:10.0.0.0/104": "10.0.0.0/8",
	} {
		p, err := gate.ParseAllow(in)
		if err != nil || p.String() != want {
			t.Errorf("ParseAllow(%q) = %v %v, want %s", in, p, err, want)
		}
	}
	for _, bad := range []string{"", "x", "10.0.0.0/33", "fe80::1%eth0", "10.0.0.1/", "*"} {
		if _, err := gate.ParseAllow(bad); err == nil {
			t.Errorf("ParseAllow(%q) accepted", bad)
		}
	}
}

// Issued codes are single-use and bound to their tunnel's host.
func TestCallbackCode(t *testing.T) {
	e := newEnv(t, 0, map[string]string{"op": gate.Operator, "op2": gate.Operator, "pw": gate.Password})
	if _, _, err := e.g.IssueCode("pw.example.com"); err == nil {
		t.Fatal("a code for a password tunnel")
	}
	code, host, err := e.g.IssueCode("OP.example.com:443")
	if err != nil || host != "op.example.com" {
		t.Fatalf("%q %v", host, err)
	}
	cb := func(host, code string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", gate.Prefix+"callback?code="+url.QueryEscape(code)+"&next=/z", nil)
		r.Host, r.RemoteAddr = host, "127.0.0.1:1"
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		return w
	}
	if w := cb("op.example.com", code); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/z" {
		t.Fatalf("callback: %d %v", w.Code, w.Header())
	}
	if w := cb("op.example.com", code); w.Code != http.StatusUnauthorized {
		t.Fatalf("second use: %d", w.Code)
	}
	code, _, _ = e.g.IssueCode("op.example.com")
	if w := cb("op2.example.com", code); w.Code != http.StatusUnauthorized {
		t.Fatalf("on another host: %d", w.Code)
	}
}

// TestOwnDomainsGatedAlike: a tunnel's own domain is gated as its
// subdomain is, with sessions of its own; removing the domain leaves the
// tunnel's other sessions alone, and the name is no site any more.
func TestOwnDomainsGatedAlike(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 0, map[string]string{"pw": gate.Password})
	ds := []string{"wiki.example.org"}
	if _, err := e.svc.UpdateTunnel(ctx, e.ids["pw"], machines.TunnelInput{Domains: &ds}); err != nil {
		t.Fatal(err)
	}
	if w := e.check("Wiki.Example.org", "", "", "/x"); w.Code != http.StatusFound || w.Header().Get("Location") != "/.tunnelsvc/login?next=%2Fx" {
		t.Fatalf("own domain without a session: %d %v", w.Code, w.Header())
	}
	own, sub := e.signIn(t, "wiki.example.org"), e.signIn(t, "pw.example.com")
	if w := e.check("wiki.example.org", gate.CookieName+"="+own, "", "/"); w.Code != 200 {
		t.Fatalf("own domain with its session: %d", w.Code)
	}
	none := []string{}
	if _, err := e.svc.UpdateTunnel(ctx, e.ids["pw"], machines.TunnelInput{Domains: &none}); err != nil {
		t.Fatal(err)
	}
	if w := e.check("wiki.example.org", gate.CookieName+"="+own, "", "/"); w.Code != http.StatusForbidden {
		t.Fatalf("a removed domain: %d", w.Code)
	}
	if w := e.check("pw.example.com", gate.CookieName+"="+sub, "", "/"); w.Code != 200 {
		t.Fatalf("the subdomain's session after the domain went: %d", w.Code)
	}
}

// TestSSOGate: a tunnel in sso mode sends a visitor without a session to
// the dashboard's sign-in through the provider; a code is issued only for
// an identity on its list; the session it starts names the visitor to
// the app (user and email), and the visitor's own headers never stand in.
func TestSSOGate(t *testing.T) {
	e := newEnv(t, 0, map[string]string{"team": gate.SSO, "op": gate.Operator})
	w := e.check("team.example.com", "", "127.0.0.1", "/board")
	if w.Code != http.StatusFound || w.Header().Get("Location") != gate.Prefix+"login?next=%2Fboard" {
		t.Fatalf("no session: %d %v", w.Code, w.Header())
	}
	r := httptest.NewRequest("GET", gate.Prefix+"login?next=/board", nil)
	r.Host, r.RemoteAddr = "team.example.com", "127.0.0.1:1"
	lw := httptest.NewRecorder()
	e.h.ServeHTTP(lw, r)
	if loc := lw.Header().Get("Location"); lw.Code != http.StatusFound || loc != "http://router.example.com/api/auth/sso/start?gate=team.example.com&next=%2Fboard" {
		t.Fatalf("login: %d %q", lw.Code, loc)
	}
	for _, c := range []struct {
		email  string
		groups []string
		ok     bool
	}{
		{"ana@example.com", nil, true}, {"ANA@example.com", nil, true}, {"bo@corp.example", nil, true},
		{"eve@x.example", []string{"ops"}, true}, {"eve@x.example", []string{"dev"}, false}, {"", nil, false},
		{"ana@example.com.evil", nil, false},
	} {
		_, _, err := e.g.IssueSSOCode("team.example.com", c.email, c.groups)
		if (err == nil) != c.ok {
			t.Errorf("%s %v: %v", c.email, c.groups, err)
		}
	}
	if _, _, err := e.g.IssueSSOCode("op.example.com", "ana@example.com", nil); err == nil {
		t.Fatal("an sso code for an operator site")
	}
	code, host, err := e.g.IssueSSOCode("team.example.com", "bo@corp.example", nil)
	if err != nil {
		t.Fatal(err)
	}
	cr := httptest.NewRequest("GET", gate.Prefix+"callback?code="+url.QueryEscape(code)+"&next=/board", nil)
	cr.Host, cr.RemoteAddr = host, "127.0.0.1:1"
	cw := httptest.NewRecorder()
	e.h.ServeHTTP(cw, cr)
	cookie := cw.Header().Get("Set-Cookie")
	if cw.Code != http.StatusSeeOther || !strings.HasPrefix(cookie, gate.CookieName+"=") {
		t.Fatalf("callback: %d %v", cw.Code, cw.Header())
	}
	w = e.check("team.example.com", strings.SplitN(cookie, ";", 2)[0], "127.0.0.1", "/board")
	if w.Code != http.StatusOK || w.Header().Get(gate.UserHeader) != "bo" || w.Header().Get(gate.EmailHeader) != "bo@corp.example" {
		t.Fatalf("check: %d %v", w.Code, w.Header())
	}
}

func TestParseSSOAllow(t *testing.T) {
	got, err := gate.ParseSSOAllow([]string{" Ana@Example.com", "@Corp.Example", "group:Ops", "ana@example.com", ""})
	if err != nil || strings.Join(got, " ") != "ana@example.com @corp.example group:Ops" {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := gate.ParseSSOAllow([]string{"ana", "@x", "group:", "a b@c.d"}); err == nil ||
		err.Error() != `"ana", "@x", "group:", "a b@c.d": use an email, @domain or group:name` {
		t.Fatalf("bad entries: %v", err)
	}
}
