package api

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/sso"
)

// TestSSORefusals: what single sign-on refuses, and how: bad settings are
// 400 in words and change nothing; a flow that cannot sign in goes back to
// the login page with the reason (the provider's own refusal in its
// words), with no session. The sign-in itself runs against a real OpenID
// provider in Chromium (ui/test/sso.test.mjs).
func TestSSORefusals(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newEnvOn(t, engine)
		cookie := e.setup()
		put := func(body string) resp {
			return e.do(req{method: "PUT", path: "/api/auth/sso", body: body, cookie: cookie})
		}
		wantError(t, put(`{"enabled":true,"issuer":"ftp://x","client_id":"c","client_secret":"s","emails":["a@b.c"]}`), 400,
			"issuer must be the provider's https URL (its /.well-known/openid-configuration answers there)")
		wantError(t, put(`{"enabled":true,"issuer":"https://idp.example.test","client_id":"c","client_secret":"s"}`), 400,
			"say who may enter: emails, email_domains or groups")
		closed := testutil.FreePort(t)
		r := put(`{"enabled":true,"issuer":"http://127.0.0.1:` + itoa(closed) + `","client_id":"c","client_secret":"s","emails":["a@b.c"]}`)
		if r.Code != 400 || !strings.HasPrefix(r.json(t)["error"].(string), "the issuer does not answer as an OpenID provider: ") {
			t.Fatalf("unreachable issuer: %d %s", r.Code, r.Body)
		}
		got := data(t, e.do(req{method: "GET", path: "/api/auth/sso", cookie: cookie}))
		if st := got["settings"].(map[string]any); st["enabled"] != false || st["has_secret"] != false {
			t.Fatalf("refused settings were kept: %v", got)
		}
		back := func(q, want string) {
			t.Helper()
			r := e.do(req{method: "GET", path: q, header: map[string]string{"Cookie": ssoCookie + "=b"}})
			loc, _ := url.Parse(r.Header().Get("Location"))
			why, _ := url.ParseQuery(strings.TrimPrefix(loc.Fragment, "/login?"))
			if r.Code != 303 || why.Get("sso_error") != want || sessionCookie(t, r) != nil {
				t.Fatalf("GET %s: %d %q (want %q)", q, r.Code, r.Header().Get("Location"), want)
			}
		}
		back("/api/auth/sso/start", sso.ReasonOff)
		// A gate's sign-in only for a site this edge serves in sso mode:
		// never a way to send the browser to another host.
		back("/api/auth/sso/start?gate=evil.example&next=/", sso.ReasonNoSite)
		back("/api/auth/sso/callback?error=access_denied&error_description=End-User+aborted+interaction&state=x", sso.ReasonProviderSaid)
		if got := e.lastAudit(auditSSORefused); got != "the identity provider refused the sign-in: End-User aborted interaction (access_denied)" {
			t.Fatalf("audit: %q", got)
		}
		back("/api/auth/sso/callback", sso.ReasonIncomplete)
		back("/api/auth/sso/callback?state=forged&code=c", sso.ReasonUnknownFlow)
		// Text in the URL never reaches the login page: only a code's
		// fixed sentence does.
		st := data(t, e.do(req{method: "GET", path: "/api/auth/status?sso_error=Your+account+is+locked:+call+555-0100"}))
		if st["sso_error"] != "The sign-in did not happen. Start it again." {
			t.Fatalf("status with a crafted sso_error: %v", st)
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestPasswordLoginOff: password sign-in can be turned off only while
// single sign-on (or a passkey alone) signs in; the refusal of a password
// then names the ways in, and root's reset-password, which turns it back
// on. The last other way in cannot be turned off meanwhile.
func TestPasswordLoginOff(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newEnvOn(t, engine)
		cookie := e.setup()
		put := func(body string) resp {
			return e.do(req{method: "PUT", path: "/api/auth/password-login", body: body, cookie: cookie})
		}
		wantError(t, put(`{"on":false}`), 400, "password sign-in can be turned off only while single sign-on or a passkey alone signs in: turn one on first")
		// Single sign-on as the provider's settings leave it (checked
		// against a real provider in ui/test/sso.test.mjs).
		ctx := context.Background()
		if err := e.st.SetSetting(ctx, "sso", `{"enabled":true,"name":"Corp","issuer":"https://idp.example.test","client_id":"c","client_secret_sealed":"x","emails":["a@b.c"]}`); err != nil {
			t.Fatal(err)
		}
		if m := data(t, put(`{"on":false}`))["message"]; m != "password sign-in is off; ways in: sign in with Corp; and root on the VPS turns it back on with `sudo tunnelsvc reset-password`" {
			t.Fatalf("off: %v", m)
		}
		if st := data(t, e.do(req{method: "GET", path: "/api/auth/status"})); st["password_login"] != false || st["sso"] != "Corp" {
			t.Fatalf("status: %v", st)
		}
		wantError(t, e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`}), 403,
			"password sign-in is off: sign in with Corp; root on the VPS turns it back on with `sudo tunnelsvc reset-password`")
		wantError(t, e.do(req{method: "PUT", path: "/api/auth/sso", body: `{"enabled":false}`, cookie: cookie}), 400,
			"single sign-on is the only way in while password sign-in is off: turn password sign-in on first")
		// Root's way back: a reset password signs in again.
		if _, err := e.authSvc.ResetPassword(ctx, "a brand new passphrase here"); err != nil {
			t.Fatal(err)
		}
		if r := e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"a brand new passphrase here"}`}); r.Code != 200 {
			t.Fatalf("login after the reset: %d %s", r.Code, r.Body)
		}
	})
}
