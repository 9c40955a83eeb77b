// Package gate decides who may reach an HTTP tunnel. The web proxy asks it
// on every request (Caddy's forward_auth, on a loopback-only listener) and
// it answers from memory: the tunnels' access settings are loaded from the
// store when they change, and gate sessions and one-time codes live only in
// this process. It also serves the gate's own pages under the tunnel's host
// (Prefix): the password form, the operator sign-in callback and logout.
package gate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

const (
	// CookieName is the gate's session cookie, set host-only on the
	// tunnel's host. The proxy never passes it on to the machine's app.
	CookieName = "tunnelsvc_gate"
	// Prefix is the reserved path under every gated tunnel's host that the
	// proxy sends to the gate instead of the app.
	Prefix = "/.tunnelsvc/"
	// CheckPath is what the proxy's forward_auth asks. It is outside Prefix,
	// so a browser cannot reach it through a tunnel's host.
	CheckPath = "/check"
	// SessionTTL is a gate session's lifetime.
	SessionTTL = 24 * time.Hour
	// CodeTTL is how long an operator sign-in code may wait to be used.
	CodeTTL = time.Minute
	// UserHeader is what the app receives in operator mode.
	UserHeader = "X-Forwarded-User"

	maxSessions = 100000
	maxCodes    = 10000
	maxNext     = 2048
)

// Audit kinds of gate logins. Failures also write the ban tool's line.
const (
	KindLoginFailed = "GATE_LOGIN_FAILED"
	KindLogin       = "GATE_LOGIN"
)

func init() { audit.RegisterFailureKind(KindLoginFailed) }

// Access modes of an HTTP tunnel.
const (
	Public   = "public"
	Operator = "operator"
	Password = "password"
	// SSO: visitors sign in through the dashboard's OpenID provider, and
	// the tunnel's own list (SSOAllow) says who may enter.
	SSO = "sso"
)

// EmailHeader is what the app receives in sso mode beside UserHeader.
const EmailHeader = "X-Forwarded-Email"

// Options are the Gate's dependencies. Log and Now default when nil.
type Options struct {
	Store *store.Store
	// Domain returns the domain tunnels are published under.
	Domain func(ctx context.Context) (string, error)
	// Limiter is the dashboard login's rate limit, shared so that guessing
	// at gates and at the dashboard draws on one budget per address.
	Limiter *auth.Limiter
	Audit   *audit.Recorder
	Log     *slog.Logger
	Now     func() time.Time
}

// site is one gated host as the checks see it.
type site struct {
	id     int64
	host   string
	access string
	hash   string
	allow  []netip.Prefix
	// own: host is one of the tunnel's own domains, not <sub>.<domain>
	// (the same tunnel, gated alike, its sessions its own host's).
	own bool
	// ssoAllow: who may enter in sso mode (ParseSSOAllow's forms).
	ssoAllow []string
	// rules: path rules before the gate, first match wins (Rule).
	rules []store.AccessRule
	// ttl is a session's lifetime here (SessionTTL, or remember_days).
	ttl time.Duration
	// epoch grows when the operator ends the tunnel's visitor sessions.
	epoch int64
	// tokens: the tunnel's bypass tokens, by the secret's hash as the
	// store keeps it (auth.HashToken).
	tokens map[string]bypass
}

// bypass is a bypass token as the check needs it.
type bypass struct {
	name    string
	expires time.Time
}

type table struct {
	domain string
	sites  map[string]*site
}

type session struct {
	tunnelID int64
	expires  time.Time
	// who signed in, in sso mode (the app gets it in UserHeader and
	// EmailHeader).
	who Who
}

// Who is a visitor signed in through the OpenID provider.
type Who struct{ User, Email string }

type pending struct {
	tunnelID int64
	expires  time.Time
	who      Who
	// shared: the code is in the database too, which then decides who
	// takes it (another edge may have).
	shared bool
}

// Gate holds the access table, the sessions and the pending codes.
type Gate struct {
	o   Options
	tbl atomic.Pointer[table]

	mu       sync.RWMutex
	sessions map[[32]byte]session
	codes    map[[32]byte]pending
}

// New returns a Gate with an empty table; call Reload before serving.
func New(o Options) *Gate {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Limiter == nil {
		o.Limiter = auth.NewLimiter(o.Now)
	}
	g := &Gate{o: o, sessions: map[[32]byte]session{}, codes: map[[32]byte]pending{}}
	g.tbl.Store(&table{sites: map[string]*site{}})
	return g
}

// Reload reads every http tunnel's access settings. A tunnel whose access
// mode or password changed, or that is gone, loses its sessions and codes
// at once.
func (g *Gate) Reload(ctx context.Context) error {
	domain, err := g.o.Domain(ctx)
	if err != nil {
		return fmt.Errorf("gate: reading the domain: %w", err)
	}
	list, err := g.o.Store.HTTPTunnelAccess(ctx)
	if err != nil {
		return fmt.Errorf("gate: reading tunnel access: %w", err)
	}
	owned, err := g.o.Store.TunnelDomains(ctx)
	if err != nil {
		return fmt.Errorf("gate: reading tunnel domains: %w", err)
	}
	tokens, err := g.tokensByTunnel(ctx)
	if err != nil {
		return err
	}
	next := &table{domain: strings.ToLower(domain), sites: make(map[string]*site, len(list))}
	byID := make(map[int64]*site, len(list))
	for _, a := range list {
		s := &site{id: a.TunnelID, host: a.Subdomain + "." + next.domain, access: a.Access, hash: a.PasswordHash, ssoAllow: a.SSOAllow,
			rules: a.Rules, ttl: RememberFor(a.RememberDays), epoch: a.Epoch, tokens: tokens[a.TunnelID]}
		for _, p := range a.AllowIPs {
			pr, err := ParseAllow(p)
			if err != nil {
				return fmt.Errorf("gate: tunnel %d: %w", a.TunnelID, err)
			}
			s.allow = append(s.allow, pr)
		}
		byID[s.id] = s
		if next.domain != "" {
			next.sites[s.host] = s
		}
		for _, d := range owned[a.TunnelID] {
			o := *s
			o.host, o.own = d, true
			next.sites[d] = &o
		}
	}
	// The tunnels whose sessions end: their shared tokens go first, so
	// that no check re-reads one after this edge forgot it.
	ended := map[int64]bool{}
	for _, old := range g.tbl.Load().sites {
		if old.own {
			continue // its tunnel's own entry says
		}
		now, ok := byID[old.id]
		if !ok || now.access != old.access || now.hash != old.hash || now.host != old.host || now.epoch != old.epoch ||
			strings.Join(now.ssoAllow, ",") != strings.Join(old.ssoAllow, ",") {
			ended[old.id] = true
		}
	}
	if len(ended) > 0 && g.o.Store != nil {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		for id := range ended {
			if err := g.o.Store.DeleteGateTokensOf(dctx, id); err != nil {
				g.o.Log.Warn("gate: could not end a tunnel's sessions on the other edges", "tunnel", id, "err", err)
			}
		}
		cancel()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tbl.Store(next)
	if len(ended) > 0 {
		for k, s := range g.sessions {
			if ended[s.tunnelID] {
				delete(g.sessions, k)
			}
		}
		for k, c := range g.codes {
			if ended[c.tunnelID] {
				delete(g.codes, k)
			}
		}
	}
	return nil
}

// tokensByTunnel reads every tunnel's bypass tokens.
func (g *Gate) tokensByTunnel(ctx context.Context) (map[int64]map[string]bypass, error) {
	list, err := g.o.Store.BypassTokens(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("gate: reading bypass tokens: %w", err)
	}
	out := map[int64]map[string]bypass{}
	for _, b := range list {
		if out[b.TunnelID] == nil {
			out[b.TunnelID] = map[string]bypass{}
		}
		out[b.TunnelID][b.Hash] = bypass{name: b.Name, expires: b.ExpiresAt}
	}
	return out, nil
}

// RememberFor is a session's lifetime for a tunnel's remember_days.
func RememberFor(days int) time.Duration {
	if days <= 0 {
		return SessionTTL
	}
	return time.Duration(days) * 24 * time.Hour
}

// ParseAllow parses one allow_ips entry: an address or a CIDR, returned
// masked (an address becomes a single-address prefix).
func ParseAllow(v string) (netip.Prefix, error) {
	v = strings.TrimSpace(v)
	if strings.Contains(v, "/") {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR", v)
		}
		if p.Addr().Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR", v)
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR", v)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// ParseAllowList is an allow list as the gate keeps it: each entry
// parsed (ParseAllow) and written canonically, each once, in order; bad
// holds the entries that are neither an address nor a CIDR, quoted.
func ParseAllowList(list []string) (out, bad []string) {
	seen := map[string]bool{}
	for _, v := range list {
		p, err := ParseAllow(v)
		if err != nil {
			bad = append(bad, strconv.Quote(strings.TrimSpace(v)))
			continue
		}
		if s := p.String(); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out, bad
}

// lookup finds the site of a Host header value, port and case aside.
func (t *table) lookup(hostport string) *site {
	h := hostport
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	if s, ok := t.sites[h]; ok {
		return s
	}
	return t.sites[strings.ToLower(h)]
}

func (s *site) allows(a netip.Addr) bool {
	if len(s.allow) == 0 {
		return true
	}
	a = a.Unmap()
	for _, p := range s.allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func tokenKey(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// sharedTimeout bounds each database call of a gate check: sessions and
// codes are kept in the database so that every edge of a cluster honours
// them, but a check never waits long on it; what this edge made itself is
// always answered from memory.
const sharedTimeout = 300 * time.Millisecond

func (g *Gate) shared() (context.Context, context.CancelFunc, bool) {
	if g.o.Store == nil {
		return nil, nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
	return ctx, cancel, true
}

// share writes a session or code for the other edges; a failure is
// logged, and the token still works on this edge.
func (g *Gate) share(k [32]byte, kind string, tunnelID int64, expires time.Time, who Who) bool {
	ctx, cancel, ok := g.shared()
	if !ok {
		return false
	}
	defer cancel()
	if err := g.o.Store.PutGateToken(ctx, hex.EncodeToString(k[:]), kind, tunnelID, expires, store.GateWho(who)); err != nil {
		g.o.Log.Warn("gate: could not share a "+kind+" with the other edges; it works on this one", "err", err)
		return false
	}
	return true
}

// unshare ends a session or code for every edge (best effort).
func (g *Gate) unshare(k [32]byte) {
	ctx, cancel, ok := g.shared()
	if !ok {
		return
	}
	defer cancel()
	g.o.Store.DeleteGateToken(ctx, hex.EncodeToString(k[:]))
}

// sharedSession looks up a session another edge made, and keeps it here.
func (g *Gate) sharedSession(k [32]byte, now time.Time) (session, bool) {
	ctx, cancel, ok := g.shared()
	if !ok {
		return session{}, false
	}
	defer cancel()
	id, exp, who, err := g.o.Store.GateToken(ctx, hex.EncodeToString(k[:]), store.GateSession, now)
	if err != nil {
		return session{}, false
	}
	sess := session{tunnelID: id, expires: exp, who: Who(who)}
	g.mu.Lock()
	if len(g.sessions) < maxSessions {
		g.sessions[k] = sess
	}
	g.mu.Unlock()
	return sess, true
}

// validSession reports whether any gate cookie value in the request's
// Cookie headers names a live session of s.
func (g *Gate) validSession(cookies []string, s *site, now time.Time) bool {
	_, ok := g.liveSession(cookies, s, now)
	return ok
}

// liveSession is the live session of site s among the gate cookies.
func (g *Gate) liveSession(cookies []string, s *site, now time.Time) (session, bool) {
	var got session
	found := false
	eachGateCookie(cookies, func(v string) {
		if found || v == "" {
			return
		}
		k := tokenKey(v)
		g.mu.RLock()
		sess, ok := g.sessions[k]
		g.mu.RUnlock()
		if !ok {
			sess, ok = g.sharedSession(k, now)
		}
		found = ok && sess.tunnelID == s.id && now.Before(sess.expires)
		if found {
			got = sess
		}
	})
	return got, found
}

// newSession starts a gate session for site s and returns its token.
func (g *Gate) newSession(s *site) (string, error) { return g.newSessionAs(s, Who{}) }

// newSessionAs is newSession for who (sso mode).
func (g *Gate) newSessionAs(s *site, who Who) (string, error) {
	token, err := auth.NewToken()
	if err != nil {
		return "", err
	}
	now := g.o.Now()
	g.mu.Lock()
	if len(g.sessions) >= maxSessions {
		for k, v := range g.sessions {
			if !now.Before(v.expires) {
				delete(g.sessions, k)
			}
		}
		for k := range g.sessions {
			if len(g.sessions) < maxSessions {
				break
			}
			delete(g.sessions, k)
		}
	}
	k := tokenKey(token)
	g.sessions[k] = session{tunnelID: s.id, expires: now.Add(s.ttl), who: who}
	g.mu.Unlock()
	g.share(k, store.GateSession, s.id, now.Add(s.ttl), who)
	return token, nil
}

// endSessions ends the sessions named by the request's gate cookies.
func (g *Gate) endSessions(cookies []string) {
	var ended [][32]byte
	g.mu.Lock()
	eachGateCookie(cookies, func(v string) {
		k := tokenKey(v)
		delete(g.sessions, k)
		ended = append(ended, k)
	})
	g.mu.Unlock()
	for _, k := range ended {
		g.unshare(k)
	}
}

// ErrNotOperatorSite: the host named is not an HTTP tunnel in operator mode.
var ErrNotOperatorSite = fmt.Errorf("not a tunnel with operator access")

// IssueCode returns a one-time code that signs a browser in to host (a
// tunnel in operator mode) at Prefix+"callback", and the site's own host
// name to send it to. The dashboard calls it for a request that carries a
// live dashboard session.
func (g *Gate) IssueCode(host string) (code string, siteHost string, err error) {
	s := g.tbl.Load().lookup(host)
	if s == nil || s.access != Operator {
		return "", "", ErrNotOperatorSite
	}
	return g.issue(s, Who{})
}

// ErrNotSSOSite: the host named is not an HTTP tunnel in sso mode.
var ErrNotSSOSite = fmt.Errorf("not a tunnel with single sign-on access")

// ErrSSONotAllowed: the identity is not on the tunnel's list.
var ErrSSONotAllowed = fmt.Errorf("not among who may enter this site")

// IssueSSOCode is IssueCode for a visitor the OpenID provider signed in
// (host is a tunnel in sso mode): ErrSSONotAllowed unless the tunnel's
// list has their email, its domain or one of their groups.
func (g *Gate) IssueSSOCode(host, email string, groups []string) (code string, siteHost string, err error) {
	s := g.tbl.Load().lookup(host)
	if s == nil || s.access != SSO {
		return "", "", ErrNotSSOSite
	}
	if !SSOAllows(s.ssoAllow, email, groups) {
		return "", "", ErrSSONotAllowed
	}
	user := email
	if at := strings.Index(email, "@"); at > 0 {
		user = email[:at]
	}
	return g.issue(s, Who{User: user, Email: email})
}

// issue makes a one-time code for site s (signing in who).
func (g *Gate) issue(s *site, who Who) (code string, siteHost string, err error) {
	c, err := auth.NewToken()
	if err != nil {
		return "", "", err
	}
	now := g.o.Now()
	g.mu.Lock()
	if len(g.codes) >= maxCodes {
		for k, v := range g.codes {
			if !now.Before(v.expires) {
				delete(g.codes, k)
			}
		}
		for k := range g.codes {
			if len(g.codes) < maxCodes {
				break
			}
			delete(g.codes, k)
		}
	}
	k := tokenKey(c)
	g.codes[k] = pending{tunnelID: s.id, expires: now.Add(CodeTTL), who: who}
	g.mu.Unlock()
	if g.share(k, store.GateCode, s.id, now.Add(CodeTTL), who) {
		g.mu.Lock()
		if p, ok := g.codes[k]; ok {
			p.shared = true
			g.codes[k] = p
		}
		g.mu.Unlock()
	}
	return c, s.host, nil
}

// redeem consumes a code for site s.
func (g *Gate) redeem(c string, s *site) bool {
	_, ok := g.redeemAs(c, s)
	return ok
}

// redeemAs is redeem, with who the code signs in (sso mode; known where
// the code was issued).
func (g *Gate) redeemAs(c string, s *site) (Who, bool) {
	if c == "" {
		return Who{}, false
	}
	k := tokenKey(c)
	now := g.o.Now()
	g.mu.Lock()
	got, ok := g.codes[k]
	delete(g.codes, k)
	g.mu.Unlock()
	if ok && !got.shared {
		return got.who, got.tunnelID == s.id && now.Before(got.expires)
	}
	// A shared code (issued here or by the dashboard on another edge): of
	// all edges, the one that takes it from the database has it.
	ctx, cancel, shared := g.shared()
	if !shared {
		return Who{}, false
	}
	defer cancel()
	id, who, err := g.o.Store.TakeGateToken(ctx, hex.EncodeToString(k[:]), store.GateCode, now)
	if ok && err != nil && !errors.Is(err, store.ErrNotFound) {
		// The database does not answer: this edge issued the code, and
		// decides from memory.
		return got.who, got.tunnelID == s.id && now.Before(got.expires)
	}
	return Who(who), err == nil && id == s.id
}

// Domain is the domain of the loaded table ("" before a domain is set).
func (g *Gate) Domain() string { return g.tbl.Load().domain }

// eachGateCookie calls fn with the value of every gate cookie in the
// Cookie header values (browsers may send several, or split them over
// several headers).
func eachGateCookie(headers []string, fn func(string)) {
	for _, h := range headers {
		for len(h) > 0 {
			var part string
			part, h, _ = strings.Cut(h, ";")
			name, val, _ := strings.Cut(strings.TrimSpace(part), "=")
			if strings.TrimSpace(name) == CookieName {
				fn(strings.TrimSpace(val))
			}
		}
	}
}

// StripCookie returns the Cookie header values joined into one, without
// any gate cookie: what the app receives.
func StripCookie(headers []string) string {
	var b strings.Builder
	for _, h := range headers {
		for len(h) > 0 {
			var part string
			part, h, _ = strings.Cut(h, ";")
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			name, _, _ := strings.Cut(part, "=")
			if strings.TrimSpace(name) == CookieName {
				continue
			}
			if b.Len() > 0 {
				b.WriteString("; ")
			}
			b.WriteString(part)
		}
	}
	return b.String()
}

// SafeNext returns next when it is a path on the same host that is not
// one of the gate's own pages, else "/".
func SafeNext(next string) string {
	if next == "" || len(next) > maxNext || next[0] != '/' || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	for i := 0; i < len(next); i++ {
		if c := next[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return "/"
		}
	}
	if strings.HasPrefix(next, Prefix) || next == strings.TrimSuffix(Prefix, "/") {
		return "/"
	}
	return next
}

// ParseSSOAllow checks a tunnel's list of who may enter in sso mode:
// emails ("ana@example.com"), email domains ("@example.com") and groups
// ("group:ops"). It returns the entries cleaned (emails and domains in
// lower case, duplicates dropped) or an error naming the bad ones.
func ParseSSOAllow(list []string) ([]string, error) {
	if len(list) > 64 {
		return nil, fmt.Errorf("at most 64 entries")
	}
	var out, bad []string
	seen := map[string]bool{}
	for _, v := range list {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		ok := false
		switch {
		case strings.HasPrefix(v, "group:"):
			g := strings.TrimPrefix(v, "group:")
			ok = g != "" && len(g) <= 128 && !strings.ContainsAny(g, ",\r\n\t ")
		case strings.HasPrefix(v, "@"):
			v = strings.ToLower(v)
			ok = len(v) > 3 && strings.Contains(v[1:], ".") && !strings.ContainsAny(v[1:], "@,; \t")
		default:
			v = strings.ToLower(v)
			at := strings.LastIndex(v, "@")
			ok = at > 0 && at < len(v)-3 && strings.Contains(v[at+1:], ".") && !strings.ContainsAny(v, ",; \t")
		}
		if !ok {
			bad = append(bad, fmt.Sprintf("%q", v))
			continue
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%s: use an email, @domain or group:name", strings.Join(bad, ", "))
	}
	return out, nil
}

// SSOAllows says whether list lets in the visitor with email and groups.
func SSOAllows(list []string, email string, groups []string) bool {
	email = strings.ToLower(email)
	for _, e := range list {
		switch {
		case strings.HasPrefix(e, "group:"):
			for _, g := range groups {
				if g == e[len("group:"):] {
					return true
				}
			}
		case strings.HasPrefix(e, "@"):
			if email != "" && strings.HasSuffix(email, e) {
				return true
			}
		default:
			if email != "" && email == e {
				return true
			}
		}
	}
	return false
}

// SSOWantsGroups says whether the tunnel at host (sso mode) lets in by
// group: its sign-in then asks the provider for the groups scope.
func (g *Gate) SSOWantsGroups(host string) bool {
	s := g.tbl.Load().lookup(host)
	if s == nil || s.access != SSO {
		return false
	}
	for _, e := range s.ssoAllow {
		if strings.HasPrefix(e, "group:") {
			return true
		}
	}
	return false
}

// SSOSite returns the canonical host of the tunnel at host when it is in
// sso mode (false otherwise): the dashboard starts and ends a gate's
// sign-in only for such a host, so that it never sends a browser to a
// host it does not serve.
func (g *Gate) SSOSite(host string) (string, bool) {
	s := g.tbl.Load().lookup(host)
	if s == nil || s.access != SSO {
		return "", false
	}
	return s.host, true
}
