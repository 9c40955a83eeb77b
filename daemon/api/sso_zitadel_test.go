package api

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/sso"
)

// ssoRedirect is the redirect URI the test server has (the host e.do sends).
const ssoRedirect = "http://127.0.0.1:7380/api/auth/sso/callback"

// ssoEnv is the API with single sign-on through a real provider that this
// project did not write: zitadel/oidc's example OP.
type ssoEnv struct {
	*testEnv
	op     *testutil.ZitadelOP
	cookie string
}

func newSSOEnv(t *testing.T, trailingSlash bool) *ssoEnv {
	t.Helper()
	op := testutil.StartZitadelOP(t, testutil.ZitadelOPOptions{TrailingSlash: trailingSlash, RedirectURIs: []string{ssoRedirect}})
	e := &ssoEnv{op: op}
	e.testEnv = newEnv(t)
	e.cookie = e.setup()
	body := `{"enabled":true,"name":"Zitadel","issuer":"` + op.Issuer + `","client_id":"` + op.ClientID + `","client_secret":"` + op.ClientSecret +
		`","email_domains":["allowed.test"]}`
	got := data(t, e.do(req{method: "PUT", path: "/api/auth/sso", body: body, cookie: e.cookie}))
	if st := got["settings"].(map[string]any); st["issuer"] != op.Issuer || st["enabled"] != true {
		t.Fatalf("saved settings: %v (the issuer must be kept exactly: %q)", st, op.Issuer)
	}
	return e
}

// start begins a sign-in and returns the provider's URL and the browser's
// binding cookie.
func (e *ssoEnv) start(t *testing.T) (string, string) {
	t.Helper()
	r := e.do(req{method: "GET", path: "/api/auth/sso/start"})
	if r.Code != 303 {
		t.Fatalf("start: %d %s", r.Code, r.Body)
	}
	for _, c := range r.Result().Cookies() {
		if c.Name == ssoCookie {
			if !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.MaxAge <= 0 || c.MaxAge > 600 || c.Path != ssoCookiePath {
				t.Fatalf("the sign-in's cookie: %+v", c)
			}
			return r.Header().Get("Location"), c.Value
		}
	}
	t.Fatalf("start set no %s cookie: %v", ssoCookie, r.Header())
	return "", ""
}

// signIn signs user in at the provider, as a browser with its own cookie
// jar, and returns the callback's path and query.
func (e *ssoEnv) signIn(t *testing.T, authURL, user, password string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	cb := e.op.SignIn(t, &http.Client{Jar: jar, Timeout: 20 * time.Second}, authURL, user, password)
	if !strings.HasPrefix(cb.String(), ssoRedirect+"?") || cb.Query().Get("code") == "" {
		t.Fatalf("the provider sent the browser to %s", cb)
	}
	return cb.RequestURI()
}

// callback redeems the provider's answer with binding as the browser's
// cookie ("" for none).
func (e *ssoEnv) callback(path, binding string) resp {
	q := req{method: "GET", path: path}
	if binding != "" {
		q.header = map[string]string{"Cookie": ssoCookie + "=" + binding}
	}
	return e.do(q)
}

// wantBack checks a sign-in that did not happen: back to the login page
// with the reason's code alone, no session.
func wantBack(t *testing.T, r resp, code string) {
	t.Helper()
	if r.Code != 303 || r.Header().Get("Location") != "/#/login?sso_error="+code || sessionCookie(t, r) != nil {
		t.Fatalf("want back to the login page with %s: %d %q %v", code, r.Code, r.Header().Get("Location"), r.Header()["Set-Cookie"])
	}
}

// lastAudit is the newest audit entry of kind.
func (e *testEnv) lastAudit(kind string) string {
	e.t.Helper()
	es, err := e.st.ListAudit(context.Background(), 200)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, a := range es {
		if a.Kind == kind {
			return a.Detail
		}
	}
	return ""
}

// TestSSOZitadel: single sign-on against a second independent provider,
// with its issuer as it publishes it (with and without a trailing slash):
// a verified user signs in; a user whose email the provider has not
// verified (it leaves email_verified out) is refused in words; a callback
// redeemed in another cookie jar is no session, and leaves the sign-in to
// its own browser; a provider that is down is said so.
func TestSSOZitadel(t *testing.T) {
	for _, slash := range []bool{false, true} {
		name := "issuer without a trailing slash"
		if slash {
			name = "issuer with a trailing slash"
		}
		t.Run(name, func(t *testing.T) {
			e := newSSOEnv(t, slash)

			authURL, binding := e.start(t)
			cb := e.signIn(t, authURL, testutil.ZitadelAna, testutil.ZitadelAnaPassword)
			// Another browser (no cookie, or another one) gets nothing,
			// and the sign-in stays its own browser's.
			wantBack(t, e.callback(cb, ""), sso.ReasonUnknownFlow)
			wantBack(t, e.callback(cb, "a-cookie-of-another-browser"), sso.ReasonUnknownFlow)
			r := e.callback(cb, binding)
			if r.Code != 303 || r.Header().Get("Location") != "/#/overview" || sessionCookie(t, r) == nil {
				t.Fatalf("ana's sign-in: %d %q", r.Code, r.Header().Get("Location"))
			}
			if got := e.lastAudit(auditSSOSuccess); got != "signed in as "+testutil.ZitadelAna {
				t.Fatalf("audit: %q", got)
			}
			// Redeemed once.
			wantBack(t, e.callback(cb, binding), sso.ReasonUnknownFlow)

			// Carol's email is not verified: refused, whatever the list says.
			authURL, binding = e.start(t)
			wantBack(t, e.callback(e.signIn(t, authURL, testutil.ZitadelCarol, testutil.ZitadelCarolPassword), binding), sso.ReasonUnverified)
			if got, want := e.lastAudit(auditSSORefused), testutil.ZitadelCarol+" is not verified by Zitadel ("+e.op.Issuer+")"; got != want {
				t.Fatalf("audit: %q, want %q", got, want)
			}
			// The login page says the fixed sentence of the code.
			st := data(t, e.do(req{method: "GET", path: "/api/auth/status?sso_error=" + sso.ReasonUnverified}))
			if st["sso_error"] != sso.Reasons[sso.ReasonUnverified] {
				t.Fatalf("status: %v", st)
			}

			// The provider goes down after the sign-in started: its token
			// endpoint does not answer.
			authURL, binding = e.start(t)
			cb = e.signIn(t, authURL, testutil.ZitadelAna, testutil.ZitadelAnaPassword)
			e.op.Stop()
			wantBack(t, e.callback(cb, binding), sso.ReasonTokenDown)
			if got := e.lastAudit(auditSSORefused); !strings.Contains(got, "token endpoint did not answer") || !strings.Contains(got, "connection refused") {
				t.Fatalf("audit: %q", got)
			}
			// And once its configuration is asked again, the start says so.
			e.now = e.now.Add(sso.ProviderTTL + time.Minute)
			r = e.do(req{method: "GET", path: "/api/auth/sso/start"})
			wantBack(t, r, sso.ReasonDown)
		})
	}
}

// TestSSOIsAFirstFactor: with 2FA enrolled, a sign-in through the
// provider goes on to the second-factor step as a password does; there is
// no session until that step passes, and the session is recent from then.
func TestSSOIsAFirstFactor(t *testing.T) {
	e := newSSOEnv(t, false)
	secret, _ := e.enableTOTP(e.cookie, "phone")
	authURL, binding := e.start(t)
	r := e.callback(e.signIn(t, authURL, testutil.ZitadelAna, testutil.ZitadelAnaPassword), binding)
	loc, _ := url.Parse(r.Header().Get("Location"))
	q, _ := url.ParseQuery(strings.TrimPrefix(loc.Fragment, "/login?"))
	if r.Code != 303 || q.Get("step") != "2fa" || q.Get("pending") == "" || sessionCookie(t, r) != nil {
		t.Fatalf("SSO with 2FA on: %d %q %v", r.Code, r.Header().Get("Location"), r.Header()["Set-Cookie"])
	}
	wantError(t, e.do(req{method: "POST", path: "/api/auth/login/2fa", body: `{"pending_token":"` + q.Get("pending") + `","code":"000000"}`}), 401, "invalid code")
	e.now = e.now.Add(30 * time.Second) // the next code: the enrolment's is spent
	done := e.do(req{method: "POST", path: "/api/auth/login/2fa", body: `{"pending_token":"` + q.Get("pending") + `","code":"` + codeFor(t, secret, e.now) + `"}`})
	if done.Code != 200 || sessionCookie(t, done) == nil {
		t.Fatalf("the second factor: %d %s", done.Code, done.Body)
	}
	st := data(t, e.do(req{method: "GET", path: "/api/auth/step-up", cookie: sessionCookie(t, done).Value}))
	if st["recent"] != true {
		t.Fatalf("after both factors: %v", st)
	}
}
