package gate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// checkWith asks the gate as the proxy does, with extra request headers.
func (e *env) checkWith(host, uri string, headers map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", gate.CheckPath, nil)
	r.Host = host
	r.RemoteAddr = "127.0.0.1:50000"
	r.Header.Set("X-Forwarded-Method", "GET")
	r.Header.Set("X-Forwarded-Uri", uri)
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

// TestBypassTokens: an app's token passes a password, operator and sso
// gate with no cookie, in either header, as "token:<name>"; a wrong,
// revoked or expired one is refused with 401 (never a sign-in page),
// counted toward the address's limit, and an app's own bearer token is
// left to the session as before.
func TestBypassTokens(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 0, map[string]string{"pw": gate.Password, "op": gate.Operator, "sso": gate.SSO, "pub": gate.Public})
	str := func(s string) *string { return &s }
	mk := func(sub, name string, days int) string {
		t.Helper()
		b, err := e.svc.CreateBypassToken(ctx, e.ids[sub], machines.BypassTokenInput{Name: str(name), ExpiresInDays: &days})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(b.Token, gate.TokenPrefix) || b.Name != name {
			t.Fatalf("made %+v", b)
		}
		return b.Token
	}
	pw, op, sso := mk("pw", "ios", 30), mk("op", "ci", 30), mk("sso", "android", 30)
	for _, c := range []struct{ host, token, user string }{
		{"pw.example.com", pw, "token:ios"}, {"op.example.com", op, "token:ci"}, {"sso.example.com", sso, "token:android"},
	} {
		for _, h := range []map[string]string{{"Authorization": "Bearer " + c.token}, {gate.TokenHeader: c.token}} {
			w := e.checkWith(c.host, "/api/items", h)
			if w.Code != 200 || w.Header().Get(gate.UserHeader) != c.user {
				t.Fatalf("%s with its token in %v: %d %v %s", c.host, h, w.Code, w.Header(), w.Body)
			}
		}
	}
	// Each token opens its own tunnel only.
	if w := e.checkWith("op.example.com", "/", map[string]string{gate.TokenHeader: pw}); w.Code != http.StatusUnauthorized ||
		!strings.Contains(w.Body.String(), "not valid here: it is wrong, revoked or expired") {
		t.Fatalf("another tunnel's token: %d %s", w.Code, w.Body)
	}
	// An app's own bearer token is not ours: the gate asks for a session.
	if w := e.checkWith("pw.example.com", "/", map[string]string{"Authorization": "Bearer eyJhbGciOi.app.own"}); w.Code != http.StatusFound {
		t.Fatalf("an app's own bearer token: %d", w.Code)
	}
	// Revoked: refused at once.
	list, _ := e.svc.BypassTokens(ctx, e.ids["pw"])
	if _, err := e.svc.RevokeBypassToken(ctx, e.ids["pw"], list[0].ID); err != nil {
		t.Fatal(err)
	}
	if w := e.checkWith("pw.example.com", "/", map[string]string{gate.TokenHeader: pw}); w.Code != http.StatusUnauthorized {
		t.Fatalf("a revoked token: %d", w.Code)
	}
	// Wrong guesses count toward the address's limit, then 429 with
	// Retry-After, even for a good token.
	for i := 0; i < 20; i++ {
		e.checkWith("op.example.com", "/", map[string]string{gate.TokenHeader: gate.TokenPrefix + "guess"})
	}
	w := e.checkWith("op.example.com", "/", map[string]string{gate.TokenHeader: op})
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("after 20 wrong tokens: %d %v", w.Code, w.Header())
	}
}

// TestBypassTokenExpires: a token past its expiry is refused.
func TestBypassTokenExpires(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 0, map[string]string{"pw": gate.Password})
	now := time.Now()
	e.svc.Now = func() time.Time { return now.Add(-31 * 24 * time.Hour) }
	name, days := "old", 30
	b, err := e.svc.CreateBypassToken(ctx, e.ids["pw"], machines.BypassTokenInput{Name: &name, ExpiresInDays: &days})
	if err != nil {
		t.Fatal(err)
	}
	if w := e.checkWith("pw.example.com", "/", map[string]string{gate.TokenHeader: b.Token}); w.Code != http.StatusUnauthorized {
		t.Fatalf("an expired token: %d", w.Code)
	}
}

// TestPathRules: first match wins; allow skips the gate, deny refuses
// even a signed-in visitor, gate asks as before; dot segments cannot
// walk around a deny.
func TestPathRules(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 0, map[string]string{"pw": gate.Password, "pub": gate.Public})
	rules := []store.AccessRule{{Path: "/api/admin*", Action: gate.RuleDeny}, {Path: "/api/*", Action: gate.RuleAllow},
		{Path: "/health", Action: gate.RuleAllow}, {Path: "/private*", Action: gate.RuleGate}}
	for _, sub := range []string{"pw", "pub"} {
		if _, err := e.svc.UpdateTunnel(ctx, e.ids[sub], machines.TunnelInput{Rules: &rules}); err != nil {
			t.Fatal(err)
		}
	}
	c := e.signIn(t, "pw.example.com")
	for _, x := range []struct {
		host, uri, cookie string
		want              int
	}{
		{"pw.example.com", "/api/items?x=1", "", 200},
		{"pw.example.com", "/health", "", 200},
		{"pw.example.com", "/healthz", "", http.StatusFound},
		{"pw.example.com", "/api/admin/users", "", http.StatusForbidden},
		{"pw.example.com", "/api/admin/users", c, http.StatusForbidden},
		{"pw.example.com", "/api/x/../admin/users", c, http.StatusForbidden},
		{"pw.example.com", "/api/%61dmin", "", http.StatusForbidden},
		{"pw.example.com", "/api/../private/x", "", http.StatusFound},
		{"pw.example.com", "/private/x", c, 200},
		{"pub.example.com", "/api/admin", "", http.StatusForbidden},
		{"pub.example.com", "/anything", "", 200},
	} {
		cookie := ""
		if x.cookie != "" {
			cookie = gate.CookieName + "=" + x.cookie
		}
		if w := e.check(x.host, cookie, "", x.uri); w.Code != x.want {
			t.Errorf("%s%s (signed in: %v): %d, want %d", x.host, x.uri, x.cookie != "", w.Code, x.want)
		}
	}
	for _, bad := range []struct {
		rules []store.AccessRule
		msg   string
	}{
		{[]store.AccessRule{{Path: "api/*", Action: gate.RuleAllow}}, "rules[0].path must start with /"},
		{[]store.AccessRule{{Path: "/a", Action: "allow"}, {Path: "/b*c", Action: "allow"}}, "rules[1].path must start with /"},
		{[]store.AccessRule{{Path: "/a", Action: "open"}}, `rules[0].action must be "allow", "gate" or "deny"`},
		{[]store.AccessRule{{Path: "/a b", Action: "deny"}}, `rules[0].path holds " "`},
	} {
		_, err := e.svc.UpdateTunnel(ctx, e.ids["pw"], machines.TunnelInput{Rules: &bad.rules})
		if err == nil || !strings.HasPrefix(err.Error(), bad.msg) {
			t.Errorf("%v: %v, want %q", bad.rules, err, bad.msg)
		}
	}
}

// TestRememberDays: a password gate with remember_days sets a cookie for
// that long; ending the tunnel's visitor sessions ends it.
func TestRememberDays(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 0, map[string]string{"pw": gate.Password, "op": gate.Operator})
	days := 30
	if _, err := e.svc.UpdateTunnel(ctx, e.ids["pw"], machines.TunnelInput{RememberDays: &days}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.UpdateTunnel(ctx, e.ids["op"], machines.TunnelInput{RememberDays: &days}); err == nil ||
		err.Error() != `remember_days is only for access "password" and "sso"` {
		t.Fatalf("remember_days on an operator gate: %v", err)
	}
	r := httptest.NewRequest("POST", gate.Prefix+"login", strings.NewReader("password=correct+horse+battery+staple"))
	r.Host, r.RemoteAddr = "pw.example.com", "127.0.0.1:50000"
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	var cookie *http.Cookie
	for _, c := range w.Result().Cookies() {
		if c.Name == gate.CookieName {
			cookie = c
		}
	}
	if cookie == nil || cookie.MaxAge != 30*24*3600 {
		t.Fatalf("the remembered sign-in's cookie: %+v", cookie)
	}
	if e.check("pw.example.com", gate.CookieName+"="+cookie.Value, "", "/").Code != 200 {
		t.Fatal("the remembered session refused")
	}
	if _, err := e.svc.EndVisitorSessions(ctx, e.ids["pw"]); err != nil {
		t.Fatal(err)
	}
	if w := e.check("pw.example.com", gate.CookieName+"="+cookie.Value, "", "/"); w.Code != http.StatusFound {
		t.Fatalf("after every visitor was signed out: %d", w.Code)
	}
}
