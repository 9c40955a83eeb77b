package gate

import (
	"context"
	"errors"
	"html/template"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/sso"
)

// MaxFormBytes caps a gate form's body.
const MaxFormBytes = 8 << 10

// AuthorizePath is the dashboard's endpoint (under router.<domain>) that
// issues an operator sign-in code for a tunnel host.
const AuthorizePath = "/api/gate/authorize"

// Handler serves the gate listener: CheckPath for the proxy, and the pages
// under Prefix that the proxy sends from a tunnel's host.
func (g *Gate) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+CheckPath, g.check)
	mux.HandleFunc("HEAD "+CheckPath, g.check)
	pages := http.NewServeMux()
	pages.HandleFunc("GET "+Prefix+"login", g.loginPage)
	pages.HandleFunc("POST "+Prefix+"login", g.loginSubmit)
	pages.HandleFunc("GET "+Prefix+"callback", g.callback)
	pages.HandleFunc("GET "+Prefix+"logout", g.logout)
	pages.HandleFunc("POST "+Prefix+"logout", g.logout)
	pages.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		g.page(w, http.StatusNotFound, pageData{Title: "Not found", Message: "There is no such page."})
	})
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.page(w, http.StatusForbidden, pageData{Title: "Refused", Message: "Cross-origin request refused."})
	}))
	mux.Handle(Prefix, cop.Handler(pages))
	return mux
}

// clientAddr is the browser's address: the proxy in front (always on
// loopback: the listener is loopback-only) appends it to X-Forwarded-For.
func clientAddr(r *http.Request) netip.Addr {
	return auth.ClientAddr(r, netip.Addr.IsLoopback)
}

func scheme(r *http.Request) string {
	if strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		return "https"
	}
	return "http"
}

// check answers the proxy: 2xx lets the request through to the app (with
// the Cookie header the app gets and, in operator mode, the user), any
// other answer goes back to the browser as it is. In order: the address
// list, the path rules, a bypass token, then the session.
func (g *Gate) check(w http.ResponseWriter, r *http.Request) {
	s := g.tbl.Load().lookup(r.Host)
	if s == nil {
		http.Error(w, "This site is not served here.", http.StatusForbidden)
		return
	}
	addr := clientAddr(r)
	if !s.allows(addr) {
		http.Error(w, "Your address ("+addr.String()+") may not reach this site.", http.StatusForbidden)
		return
	}
	switch actionFor(s.rules, r) {
	case RuleDeny:
		http.Error(w, "This path of the site is closed.", http.StatusForbidden)
		return
	case RuleAllow:
		g.pass(w, r, s, Who{})
		return
	}
	if s.access == Public {
		g.pass(w, r, s, Who{})
		return
	}
	if token, ok := bypassToken(r); ok {
		g.checkToken(w, r, s, token)
		return
	}
	sess, live := g.liveSession(r.Header["Cookie"], s, g.o.Now())
	if !live {
		m := r.Header.Get("X-Forwarded-Method")
		if m == "" || m == http.MethodGet || m == http.MethodHead {
			next := SafeNext(r.Header.Get("X-Forwarded-Uri"))
			w.Header().Set("Cache-Control", "no-store")
			http.Redirect(w, r, Prefix+"login?next="+url.QueryEscape(next), http.StatusFound)
			return
		}
		http.Error(w, "Sign in at "+Prefix+"login first.", http.StatusUnauthorized)
		return
	}
	g.pass(w, r, s, sess.who)
}

// pass lets the request through: the app gets the Cookie header without
// the gate's cookie and who it is: an operator, who signed in through the
// provider, or "token:<name>". Both headers are always answered, empty
// when not known: the web proxy copies them in operator and sso mode, and
// a mode changed a moment before its Caddyfile was reloaded must not leave
// it copying nothing (Caddy then sends its placeholder's name).
func (g *Gate) pass(w http.ResponseWriter, r *http.Request, s *site, who Who) {
	h := w.Header()
	h["Cookie"] = []string{StripCookie(r.Header["Cookie"])}
	if s.access == Operator && who.User == "" {
		who.User = "operator"
	}
	h[UserHeader] = []string{who.User}
	h[EmailHeader] = []string{who.Email}
	w.WriteHeader(http.StatusOK)
}

// KindTokenFailed is the audit kind of a wrong, revoked or expired bypass
// token; it counts toward the address's limit like a wrong password.
const KindTokenFailed = "GATE_TOKEN_FAILED"

func init() { audit.RegisterFailureKind(KindTokenFailed) }

// checkToken lets in a request that carries one of the site's bypass
// tokens, unexpired. A wrong one is refused with 401 (an app's client
// cannot follow a sign-in page), recorded, and counted toward the
// address's limit, shared with the dashboard's and the gates' logins.
func (g *Gate) checkToken(w http.ResponseWriter, r *http.Request, s *site, token string) {
	c := auth.Client{Addr: clientAddr(r), UserAgent: r.UserAgent()}
	ctx := context.WithoutCancel(r.Context())
	if wait, over := g.limited(ctx, w, c, s.host); over {
		http.Error(w, "Too many wrong tunnel tokens from your address; try again in "+wait+" seconds.", http.StatusTooManyRequests)
		return
	}
	b, ok := s.tokens[auth.HashToken(token)]
	if !ok || !g.o.Now().Before(b.expires) {
		g.failed(ctx, c, KindTokenFailed, s.host)
		w.Header().Set("WWW-Authenticate", `Bearer realm="`+s.host+`"`)
		http.Error(w, "This tunnel token is not valid here: it is wrong, revoked or expired.", http.StatusUnauthorized)
		return
	}
	g.pass(w, r, s, Who{User: "token:" + b.name})
}

// site finds the request's site and applies its address list; it writes
// the refusal itself and returns nil when there is none or it refuses.
func (g *Gate) site(w http.ResponseWriter, r *http.Request) *site {
	s := g.tbl.Load().lookup(r.Host)
	if s == nil || s.access == Public {
		g.page(w, http.StatusNotFound, pageData{Title: "Not found", Message: "This site has no sign-in."})
		return nil
	}
	if addr := clientAddr(r); !s.allows(addr) {
		g.page(w, http.StatusForbidden, pageData{Title: "Refused", Message: "Your address (" + addr.String() + ") may not reach this site."})
		return nil
	}
	return s
}

func (g *Gate) loginPage(w http.ResponseWriter, r *http.Request) {
	s := g.site(w, r)
	if s == nil {
		return
	}
	next := SafeNext(r.URL.Query().Get("next"))
	if s.access == Operator {
		g.toDashboard(w, r, s, next)
		return
	}
	if s.access == SSO {
		// Back from the provider without a session: say why, and offer
		// to try again.
		// The reason comes as a code: the page says its fixed sentence,
		// never text from the URL.
		if code := r.URL.Query().Get("sso_error"); code != "" {
			g.page(w, http.StatusForbidden, pageData{Title: "Not signed in", Message: sso.ReasonText(code), Retry: Prefix + "login?next=" + url.QueryEscape(next)})
			return
		}
		g.toSSO(w, r, s, next)
		return
	}
	g.page(w, http.StatusOK, pageData{Title: "Sign in", Host: s.host, Form: true, Next: next})
}

// toDashboard sends the browser to router.<domain> on the same scheme and
// port, which issues a code for this host if it is signed in.
func (g *Gate) toDashboard(w http.ResponseWriter, r *http.Request, s *site, next string) {
	port := ""
	if _, p, err := net.SplitHostPort(r.Host); err == nil {
		port = ":" + p
	}
	dom := g.tbl.Load().domain
	q := url.Values{"host": {s.host}, "next": {next}}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, scheme(r)+"://router."+dom+port+AuthorizePath+"?"+q.Encode(), http.StatusFound)
}

// toSSO sends the browser to the dashboard's sign-in through the OpenID
// provider, on router.<domain> with the same scheme and port, which
// sends it back here with a one-time code when the tunnel's list lets
// the identity in.
func (g *Gate) toSSO(w http.ResponseWriter, r *http.Request, s *site, next string) {
	port := ""
	if _, p, err := net.SplitHostPort(r.Host); err == nil {
		port = ":" + p
	}
	dom := g.tbl.Load().domain
	q := url.Values{"gate": {s.host}, "next": {next}}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, scheme(r)+"://router."+dom+port+SSOStartPath+"?"+q.Encode(), http.StatusFound)
}

// SSOStartPath is the dashboard's route that starts a sign-in through the
// OpenID provider.
const SSOStartPath = "/api/auth/sso/start"

func (g *Gate) loginSubmit(w http.ResponseWriter, r *http.Request) {
	s := g.site(w, r)
	if s == nil {
		return
	}
	if s.access != Password {
		g.page(w, http.StatusBadRequest, pageData{Title: "Sign in", Message: "This site signs in through the dashboard."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxFormBytes)
	if err := r.ParseForm(); err != nil {
		g.page(w, http.StatusBadRequest, pageData{Title: "Sign in", Message: "The form could not be read."})
		return
	}
	next := SafeNext(r.PostForm.Get("next"))
	pw := r.PostForm.Get("password")
	c := auth.Client{Addr: clientAddr(r), UserAgent: r.UserAgent()}
	ctx := context.WithoutCancel(r.Context())
	if wait, over := g.limited(ctx, w, c, s.host); over {
		g.page(w, http.StatusTooManyRequests, pageData{Title: "Sign in", Host: s.host, Form: true, Next: next,
			Message: "Too many attempts; try again in " + wait + " seconds."})
		return
	}
	if pw == "" || len(pw) > auth.MaxPasswordBytes {
		g.page(w, http.StatusBadRequest, pageData{Title: "Sign in", Host: s.host, Form: true, Next: next, Message: "Enter the password."})
		return
	}
	ok, err := auth.VerifyClientPassword(r.Context(), c, s.hash, pw)
	var busy *auth.RateLimitedError
	if errors.As(err, &busy) {
		w.Header().Set("Retry-After", strconv.Itoa(busy.RetryAfter))
		g.page(w, http.StatusTooManyRequests, pageData{Title: "Sign in", Host: s.host, Form: true, Next: next,
			Message: "Too many sign-ins at once; try again in " + strconv.Itoa(busy.RetryAfter) + " seconds."})
		return
	}
	if err != nil {
		g.o.Log.Error("gate: password check failed", "host", s.host, "err", err)
		g.page(w, http.StatusInternalServerError, pageData{Title: "Sign in", Message: "The password could not be checked."})
		return
	}
	if !ok {
		// The shared limiter is not reset on success: a password shared
		// with friends must not buy extra guesses at the dashboard.
		g.failed(ctx, c, KindLoginFailed, s.host)
		g.page(w, http.StatusUnauthorized, pageData{Title: "Sign in", Host: s.host, Form: true, Next: next, Message: "Wrong password."})
		return
	}
	g.signIn(w, r, s, c, next)
}

func (g *Gate) signIn(w http.ResponseWriter, r *http.Request, s *site, c auth.Client, next string) {
	g.signInAs(w, r, s, c, next, Who{})
}

func (g *Gate) signInAs(w http.ResponseWriter, r *http.Request, s *site, c auth.Client, next string, who Who) {
	token, err := g.newSessionAs(s, who)
	if err != nil {
		g.page(w, http.StatusInternalServerError, pageData{Title: "Sign in", Message: "The session could not be started."})
		return
	}
	g.record(context.WithoutCancel(r.Context()), KindLogin, c, s.host)
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: token, Path: "/", MaxAge: int(s.ttl.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: scheme(r) == "https",
	})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (g *Gate) callback(w http.ResponseWriter, r *http.Request) {
	s := g.site(w, r)
	if s == nil {
		return
	}
	q := r.URL.Query()
	c := auth.Client{Addr: clientAddr(r), UserAgent: r.UserAgent()}
	if s.access != Operator && s.access != SSO {
		g.page(w, http.StatusBadRequest, pageData{Title: "Sign in", Message: "This site does not sign in through the dashboard."})
		return
	}
	if wait, over := g.limited(context.WithoutCancel(r.Context()), w, c, s.host); over {
		g.page(w, http.StatusTooManyRequests, pageData{Title: "Sign in", Message: "Too many attempts; try again in " + wait + " seconds."})
		return
	}
	who, ok := g.redeemAs(q.Get("code"), s)
	if !ok {
		g.failed(context.WithoutCancel(r.Context()), c, KindLoginFailed, s.host)
		g.page(w, http.StatusUnauthorized, pageData{Title: "Sign in", Message: "This sign-in link is invalid or has expired.", Retry: Prefix + "login?next=" + url.QueryEscape(SafeNext(q.Get("next")))})
		return
	}
	g.signInAs(w, r, s, c, SafeNext(q.Get("next")), who)
}

func (g *Gate) logout(w http.ResponseWriter, r *http.Request) {
	g.endSessions(r.Header["Cookie"])
	v := CookieName + "=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax"
	if scheme(r) == "https" {
		v += "; Secure"
	}
	w.Header().Add("Set-Cookie", v)
	g.page(w, http.StatusOK, pageData{Title: "Signed out", Message: "You are signed out of this site.", Retry: Prefix + "login"})
}

// limited says whether c's address is past the limit it shares with the
// dashboard's login; when it is, it records that, sets Retry-After, and
// returns the seconds to wait.
func (g *Gate) limited(ctx context.Context, w http.ResponseWriter, c auth.Client, host string) (wait string, over bool) {
	ok, secs := g.o.Limiter.Check(c.Addr)
	if ok {
		return "", false
	}
	g.record(ctx, audit.LoginRateLimited, c, host)
	wait = strconv.Itoa(secs)
	w.Header().Set("Retry-After", wait)
	return wait, true
}

// failed counts a failure (kind) toward c's address's limit and records
// it.
func (g *Gate) failed(ctx context.Context, c auth.Client, kind, host string) {
	g.o.Limiter.Fail(c.Addr)
	g.record(ctx, kind, c, host)
}

func (g *Gate) record(ctx context.Context, kind string, c auth.Client, host string) {
	if g.o.Audit != nil {
		g.o.Audit.Record(ctx, audit.Event{Kind: kind, Client: c.Addr, UserAgent: c.UserAgent, Detail: "gate of " + host})
	}
}

type pageData struct {
	Title, Host, Next, Message, Retry string
	Form                              bool
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>body{font-family:system-ui,sans-serif;max-width:24rem;margin:4rem auto;padding:0 1rem}
input,button{font:inherit;padding:.4rem;width:100%;box-sizing:border-box;margin-top:.5rem}
p.msg{color:#b00}@media (prefers-color-scheme:dark){body{background:#111;color:#eee}p.msg{color:#f77}}</style>
</head><body>
<h1>{{.Title}}</h1>
{{- if .Host}}<p>{{.Host}} is protected.</p>{{end}}
{{- if .Message}}<p class="msg" role="alert">{{.Message}}</p>{{end}}
{{- if .Form}}
<form method="post" action="login">
<input type="hidden" name="next" value="{{.Next}}">
<label>Password <input type="password" name="password" autocomplete="current-password" required autofocus></label>
<button type="submit">Sign in</button>
</form>
{{- end}}
{{- if .Retry}}<p><a href="{{.Retry}}">Sign in</a></p>{{end}}
</body></html>
`))

func (g *Gate) page(w http.ResponseWriter, status int, d pageData) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	pageTmpl.Execute(w, d)
}
