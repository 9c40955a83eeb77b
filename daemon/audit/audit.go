// Package audit records authentication and security events in the audit log
// and writes every failure as one stable log line a ban tool can match.
package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Event kinds. Failures are the kinds listed in failureKinds.
const (
	Setup            = "SETUP"
	LoginSuccess     = "LOGIN_SUCCESS"
	LoginFailed      = "LOGIN_FAILED"
	LoginRateLimited = "LOGIN_RATE_LIMITED"
	Logout           = "LOGOUT"
	PasswordReset    = "PASSWORD_RESET"
	// SessionsEnded: a recovery command (disable-2fa) ended every session.
	SessionsEnded = "SESSIONS_ENDED"
	// SetupCodeFailed is a wrong X-Setup-Code on a remote setup.
	SetupCodeFailed = "SETUP_CODE_FAILED"
	// LoginGlobalLimited is a 429 because the global failure budget is
	// spent. It says nothing against the client, so it is not a failure and
	// writes no ban-tool line.
	LoginGlobalLimited = "LOGIN_GLOBAL_LIMITED"
)

var failureKinds = map[string]bool{LoginFailed: true, LoginRateLimited: true, SetupCodeFailed: true}

// RegisterFailureKind marks kind as an authentication failure, so it is also
// written as an "auth failure from" line. Domain packages call it at init.
func RegisterFailureKind(kind string) { failureKinds[kind] = true }

// FailureLine is the stable text of the failure log line; the ban tool's
// filter matches `auth failure from <HOST>`. Changing it breaks that filter.
func FailureLine(addr netip.Addr) string { return "auth failure from " + addr.String() }

// Recorder writes audit events.
type Recorder struct {
	Store *store.Store
	Log   *slog.Logger
	Now   func() time.Time
}

// Event is one thing to record.
type Event struct {
	Kind      string
	Client    netip.Addr
	UserAgent string
	Detail    string
}

// Record stores e and, for failures, logs the stable failure line. A store
// error is logged, not returned: the request that caused the event has its
// own outcome, and losing an audit row must not turn it into a 500.
func (r *Recorder) Record(ctx context.Context, e Event) {
	e.Detail = withActor(ctx, e.Detail)
	addr := ""
	if e.Client.IsValid() {
		addr = e.Client.String()
	}
	if failureKinds[e.Kind] {
		r.Log.Warn(FailureLine(e.Client), "kind", e.Kind, "detail", e.Detail)
	}
	err := r.Store.InsertAudit(context.WithoutCancel(ctx), store.AuditEntry{
		CreatedAt: r.Now(), Kind: e.Kind, ClientAddr: addr, UserAgent: truncate(e.UserAgent, 512), Detail: e.Detail,
	})
	if err != nil {
		r.Log.Error("audit log write failed", "kind", e.Kind, "err", err)
	}
}

// RecordAggregated counts e in one row per kind, client address and
// minute, so a flood of refused attempts costs one row per address and
// minute, not one per request. The failure line is logged once per row.
func (r *Recorder) RecordAggregated(ctx context.Context, e Event) {
	e.Detail = withActor(ctx, e.Detail)
	addr := ""
	if e.Client.IsValid() {
		addr = e.Client.String()
	}
	created, err := r.Store.AddAggregatedAudit(context.WithoutCancel(ctx), store.AuditEntry{
		CreatedAt: r.Now(), Kind: e.Kind, ClientAddr: addr, UserAgent: truncate(e.UserAgent, 512), Detail: e.Detail,
	})
	if err != nil {
		r.Log.Error("audit log write failed", "kind", e.Kind, "err", err)
		return
	}
	if created && failureKinds[e.Kind] {
		r.Log.Warn(FailureLine(e.Client), "kind", e.Kind, "detail", e.Detail)
	}
}

// List returns the newest entries first, at most limit.
func (r *Recorder) List(ctx context.Context, limit int) ([]store.AuditEntry, error) {
	return r.ListKind(ctx, limit, "")
}

// ErrUnknownKind is a filter that is neither a category nor a kind.
var ErrUnknownKind = errors.New("unknown kind")

// ListKind is List filtered by a category (see Categories) or an exact
// kind; "" lists everything. Each entry carries its category.
func (r *Recorder) ListKind(ctx context.Context, limit int, filter string) ([]store.AuditEntry, error) {
	var f store.AuditFilter
	switch filter = strings.TrimSpace(filter); {
	case filter == "":
	case filter == CategoryAuth:
		for _, c := range categoryPrefixes {
			f.ExcludeGlobs = append(f.ExcludeGlobs, c.prefix+"*")
		}
	case len(categoryGlobs(filter)) > 0:
		f.Globs = categoryGlobs(filter)
	case kindRe.MatchString(strings.ToUpper(filter)):
		f.Globs = []string{strings.ToUpper(filter)}
	default:
		return nil, fmt.Errorf("%w: %s", ErrUnknownKind, filter)
	}
	es, err := r.Store.ListAudit(ctx, limit, f)
	for i := range es {
		es[i].Category = Category(es[i].Kind)
	}
	return es, err
}

var kindRe = regexp.MustCompile(`^[A-Z0-9_]{1,64}$`)

// Categories of audit kinds, by prefix; every other kind is auth.
const (
	CategoryAuth     = "auth"
	CategoryMachine  = "machine"
	CategoryTunnel   = "tunnel"
	CategoryToken    = "token"
	CategorySettings = "settings"
	CategoryFirewall = "firewall"
	CategoryBanner   = "banner"
	CategorySSHKey   = "ssh_key"
)

var categoryPrefixes = []struct{ prefix, category string }{
	{"MACHINE_", CategoryMachine}, {"AGENT_", CategoryMachine},
	{"TUNNEL_", CategoryTunnel},
	{"TOKEN_", CategoryToken},
	{"SETTINGS_", CategorySettings}, {"INSTALL_", CategorySettings}, {"UNIT_", CategorySettings},
	{"EDGE_", CategorySettings},
	{"FIREWALL_", CategoryFirewall},
	{"BANNER_", CategoryBanner},
	{"SSH_KEY_", CategorySSHKey},
}

// Category is the group kind belongs to.
func Category(kind string) string {
	for _, c := range categoryPrefixes {
		if strings.HasPrefix(kind, c.prefix) {
			return c.category
		}
	}
	return CategoryAuth
}

// categoryGlobs are the GLOB patterns of a category other than auth; none
// when c is not one.
func categoryGlobs(c string) []string {
	var gs []string
	for _, p := range categoryPrefixes {
		if p.category == c {
			gs = append(gs, p.prefix+"*")
		}
	}
	return gs
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

type actorKey struct{}

// WithActor marks ctx as a request made by actor other than the operator's
// session (`API token "ci"`): every event recorded under it says so, by
// whichever service records it.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// withActor is detail with who acted added, when ctx names someone.
func withActor(ctx context.Context, detail string) string {
	actor, _ := ctx.Value(actorKey{}).(string)
	if actor == "" {
		return detail
	}
	if detail == "" {
		return "by " + actor
	}
	return detail + " (by " + actor + ")"
}
