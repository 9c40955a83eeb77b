// Package localsetup is the VPS's own set-up: the domain and server host,
// installing the web proxy and the tunnel server, and the settings that
// shape their configuration (bind address, private dashboard).
package localsetup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/docsection"
	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Settings keys: each setting has exactly one, used only here; everything
// else reads and writes settings through the Settings methods below.
const (
	keyVPS              = "vps"
	keyDomain           = "domain"
	keyBindIP           = "bind_ip"
	keyDashboardPrivate = "dashboard_private"
	// The firewall has always saved its mode under this key; status read
	// "firewall_mode" and so said "none" after svc was applied.
	keyFirewallMode = "firewall.mode"
	keyACMECA       = "acme_ca"
	keyACMECARoot   = "acme_ca_root"
)

// VPS is the stored record of an installation.
type VPS struct {
	Domain       string    `json:"domain"`
	ServerHost   string    `json:"server_host"`
	SkipWebproxy bool      `json:"skip_webproxy"`
	InstalledAt  time.Time `json:"installed_at,omitzero"`
}

// Settings reads and writes the set-up settings.
type Settings struct {
	Store *store.Store
	// Edge is this daemon's edge name: the values that are each edge's own
	// (its server host) are kept under it. "" reads and writes them as
	// one box did before edges.
	Edge string
}

func (s Settings) get(ctx context.Context, key string) (string, error) {
	v, err := s.Store.GetSetting(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	return v, err
}

// keyOutcome is the key of the outcome called name (see outcomes.go).
func keyOutcome(name string) string { return "outcome." + name }

// outcome and setOutcome read and write an operation's stored outcome.
func (s Settings) outcome(ctx context.Context, name string) (string, error) {
	return s.get(ctx, keyOutcome(name))
}

func (s Settings) setOutcome(ctx context.Context, name, v string) error {
	return s.Store.SetSetting(ctx, keyOutcome(name), v)
}

// VPS returns the stored installation record, or nil when none exists.
func (s Settings) VPS(ctx context.Context) (*VPS, error) {
	raw, err := s.get(ctx, keyVPS)
	if err != nil || raw == "" {
		return nil, err
	}
	var v VPS
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// SaveVPS stores the installation record and its domain.
func (s Settings) SaveVPS(ctx context.Context, v VPS) error {
	b, _ := json.Marshal(v)
	if err := s.Store.SetSetting(ctx, keyVPS, string(b)); err != nil {
		return err
	}
	if s.Edge != "" {
		// The server host is this edge's own address: the other edges of
		// a cluster keep theirs.
		if err := s.Store.SetSetting(ctx, edgeKey(s.Edge, "server_host"), v.ServerHost); err != nil {
			return err
		}
	}
	if v.Domain != "" {
		return s.Store.SetSetting(ctx, keyDomain, v.Domain)
	}
	return nil
}

// Domain is the VPS record's domain, else the domain setting.
func (s Settings) Domain(ctx context.Context) (string, error) {
	v, err := s.VPS(ctx)
	if err != nil {
		return "", err
	}
	if v != nil && v.Domain != "" {
		return v.Domain, nil
	}
	return s.get(ctx, keyDomain)
}

// SetDomain stores the domain setting alone (set-up skipped).
func (s Settings) SetDomain(ctx context.Context, d string) error {
	return s.Store.SetSetting(ctx, keyDomain, d)
}

// BindIP is the address this edge's public listeners bind to; "" means
// all. It is this edge's own (an address of one host).
func (s Settings) BindIP(ctx context.Context) (string, error) { return s.own(ctx, keyBindIP) }

// SetBindIP stores (or with "" clears) this edge's bind address.
func (s Settings) SetBindIP(ctx context.Context, ip string) error {
	return s.setOwn(ctx, keyBindIP, ip)
}

// DashboardPrivate reports whether the dashboard port is closed to the
// outside (only reachable through the proxy or on the box).
func (s Settings) DashboardPrivate(ctx context.Context) (bool, error) {
	v, err := s.get(ctx, keyDashboardPrivate)
	return v == "true", err
}

// SetDashboardPrivate stores the setting.
func (s Settings) SetDashboardPrivate(ctx context.Context, on bool) error {
	v := "false"
	if on {
		v = "true"
	}
	return s.Store.SetSetting(ctx, keyDashboardPrivate, v)
}

// FirewallMode is this edge's svc, manual, none, or "" when never chosen.
// The firewall package owns its meaning and writes it with
// SetFirewallMode.
func (s Settings) FirewallMode(ctx context.Context) (string, error) {
	return s.own(ctx, keyFirewallMode)
}

// SetFirewallMode stores this edge's firewall mode.
func (s Settings) SetFirewallMode(ctx context.Context, mode string) error {
	return s.setOwn(ctx, keyFirewallMode, mode)
}

// own reads this edge's value of a host setting (see Scopes). Before the
// first daemon that keeps them per edge adopted it (AdoptHostSettings), a
// value saved under the setting's old cluster-wide key counts for the
// edge that was the cluster then, the oldest, and for no other.
func (s Settings) own(ctx context.Context, key string) (string, error) {
	if s.Edge == "" {
		return s.get(ctx, key)
	}
	v, err := s.Store.GetSetting(ctx, edgeKey(s.Edge, key))
	if !errors.Is(err, store.ErrNotFound) {
		return v, err
	}
	// Whose the old value is is asked only while there is one: once
	// adopted, a read costs no look at the edges.
	legacy, err := s.get(ctx, key)
	if err != nil || legacy == "" {
		return "", err
	}
	oldest, err := s.oldestEdge(ctx)
	if err != nil || oldest != s.Edge {
		return "", err
	}
	return legacy, nil
}

func (s Settings) setOwn(ctx context.Context, key, v string) error {
	if s.Edge == "" {
		return s.Store.SetSetting(ctx, key, v)
	}
	return s.Store.SetSetting(ctx, edgeKey(s.Edge, key), v)
}

// oldestEdge is the name of the cluster's first edge ("" when none has
// reported yet): the box that was the cluster before edges.
func (s Settings) oldestEdge(ctx context.Context) (string, error) {
	edges, err := s.Store.ListEdges(ctx)
	if err != nil || len(edges) == 0 {
		return "", err
	}
	oldest := edges[0]
	for _, e := range edges[1:] {
		if e.ID < oldest.ID {
			oldest = e
		}
	}
	return oldest.Name, nil
}

// AdoptHostSettings moves the host settings saved cluster-wide before they
// were kept per edge to the edge that set them: the oldest edge, the box
// that was the cluster then (another edge leaves them). Run at start; once
// done, there is nothing left to move.
func (s Settings) AdoptHostSettings(ctx context.Context) error {
	if s.Edge == "" {
		return nil
	}
	oldest, err := s.oldestEdge(ctx)
	if err != nil || oldest != s.Edge {
		return err
	}
	for _, sc := range Scopes {
		if sc.Scope != ScopeEdge || sc.legacy == "" {
			continue
		}
		if err := s.Store.MoveSetting(ctx, sc.legacy, edgeKey(s.Edge, sc.legacy)); err != nil {
			return err
		}
	}
	return nil
}

// Scope says whether a setting describes one host (an edge) or the whole
// cluster.
const (
	ScopeEdge    = "edge"
	ScopeCluster = "cluster"
)

// SettingScope is one setting and its scope, as docs/edges.md lists them.
type SettingScope struct {
	Setting, Scope, What string
	// legacy is the cluster-wide key an edge setting had before it was
	// kept per edge ("" none).
	legacy string
}

// Scopes lists every setting the dashboard sets, and whether it belongs
// to one edge or to the cluster: the one answer the code and the docs
// (make docs) both take.
var Scopes = []SettingScope{
	{Setting: "server host", Scope: ScopeEdge, What: "the address machines dial to reach this edge (Setup; its host name by default on an edge that joined)"},
	{Setting: "bind address", Scope: ScopeEdge, What: "the address of this host its public listeners bind to (PUT /api/local/bind-ip)", legacy: keyBindIP},
	{Setting: "firewall mode", Scope: ScopeEdge, What: "who manages this host's firewall: svc, manual or none (POST /api/local/firewall/configure)", legacy: keyFirewallMode},
	{Setting: "tunnel server ports", Scope: ScopeCluster, What: "the tunnel server's control and port range (PUT /api/local/server-ports): every edge serves every machine"},
	{Setting: "domain", Scope: ScopeCluster, What: "the domain HTTP tunnels live under, and router.<domain>"},
	{Setting: "private dashboard", Scope: ScopeCluster, What: "the dashboard port closed to the outside on every edge"},
	{Setting: "ACME CA", Scope: ScopeCluster, What: "where every edge's Caddy gets its certificates (PUT /api/local/acme)"},
	{Setting: "password, 2FA, passkeys, single sign-on, API tokens", Scope: ScopeCluster, What: "the operator's identity, the same on every edge"},
	{Setting: "notifications, metrics token", Scope: ScopeCluster, What: "sent or checked once for the cluster (under a lease)"},
	{Setting: "ban tool whitelist and limits", Scope: ScopeCluster, What: "the same rules on every edge's ban tool"},
}

// ScopesTable is Scopes as docs/edges.md shows it.
func ScopesTable() string {
	var b strings.Builder
	b.WriteString("| setting | describes | what |\n|---|---|---|\n")
	for _, sc := range Scopes {
		where := "the whole cluster"
		if sc.Scope == ScopeEdge {
			where = "one edge (its own host)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", sc.Setting, where, sc.What)
	}
	return b.String()
}

// DefaultACMECA is Let's Encrypt's production directory: the ACME CA used
// until another is set. It is named in the Caddyfile rather than left to
// Caddy, whose own default also falls back to a second CA.
const DefaultACMECA = "https://acme-v02.api.letsencrypt.org/directory"

// ACME is where the web proxy gets its certificates: an ACME directory URL
// and, for a private CA, the PEM file of the root its directory's TLS
// certificate chains to.
type ACME struct {
	CA     string `json:"acme_ca"`
	CARoot string `json:"acme_ca_root"`
}

// ACME returns the ACME CA setting; CA is DefaultACMECA when none is set.
func (s Settings) ACME(ctx context.Context) (ACME, error) {
	var a ACME
	var err error
	if a.CA, err = s.get(ctx, keyACMECA); err != nil {
		return a, err
	}
	if a.CA == "" {
		a.CA = DefaultACMECA
	}
	a.CARoot, err = s.get(ctx, keyACMECARoot)
	return a, err
}

// SetACME stores the ACME CA setting (validated by Service.SetACME); an
// empty CA means DefaultACMECA.
func (s Settings) SetACME(ctx context.Context, a ACME) error {
	if err := s.Store.SetSetting(ctx, keyACMECA, a.CA); err != nil {
		return err
	}
	return s.Store.SetSetting(ctx, keyACMECARoot, a.CARoot)
}

// Reach is what reach.Resolver needs of the settings: the server host saved
// at installation, the domain, and whether the web proxy serves
// router.<domain>.
func (s Settings) Reach(ctx context.Context) (reach.Settings, error) {
	v, err := s.VPS(ctx)
	if err != nil {
		return reach.Settings{}, err
	}
	d, err := s.Domain(ctx)
	if err != nil {
		return reach.Settings{}, err
	}
	out := reach.Settings{Domain: d}
	if v != nil {
		out.ServerHost = v.ServerHost
		out.ProxyInstalled = v.Domain != "" && !v.SkipWebproxy && !v.InstalledAt.IsZero()
	}
	if s.Edge != "" {
		own, err := s.Store.GetSetting(ctx, edgeKey(s.Edge, "server_host"))
		switch {
		case err == nil:
			out.ServerHost = own
		case !errors.Is(err, store.ErrNotFound):
			return reach.Settings{}, err
		default:
			// Saved before edges: it is this edge's only when this edge is
			// the cluster. An edge that joined and was given no address of
			// its own takes its host name: never another edge's address
			// (router.<domain> is the first edge's).
			others, err := s.otherEdges(ctx)
			if err != nil {
				return reach.Settings{}, err
			}
			if len(others) > 0 {
				out.ServerHost = ""
				out.HostName = HostName()
			}
		}
	}
	return out, nil
}

// edgeKey is the settings key of one edge's own value of name.
func edgeKey(edge, name string) string { return "edge." + edge + "." + name }

// HostName is this machine's host name, the address an edge that joined
// a cluster gives machines until it is given another.
var HostName = func() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return strings.ToLower(h)
}

// otherEdges are the edges of the cluster but this one.
func (s Settings) otherEdges(ctx context.Context) ([]store.Edge, error) {
	edges, err := s.Store.ListEdges(ctx)
	if err != nil {
		return nil, err
	}
	var out []store.Edge
	for _, e := range edges {
		if e.Name != s.Edge {
			out = append(out, e)
		}
	}
	return out, nil
}

// AddressClash refuses host as this edge's address when another edge of
// the cluster already gives machines that address: the machines' clients
// for two edges would both dial one of them.
func (s Settings) AddressClash(ctx context.Context, host string) error {
	others, err := s.otherEdges(ctx)
	if err != nil {
		return err
	}
	for _, e := range others {
		if e.RetiringAt == nil && strings.EqualFold(e.Address, host) {
			return InputError(fmt.Sprintf("server_host: %s is the address of the edge %s: each edge needs an address of its own "+
				"(its host name or IP address); router.<domain> is for the dashboard, on every edge", host, e.Name))
		}
	}
	return nil
}

// The markers around the scopes table in docs/edges.md.
const (
	scopesBegin = "<!-- settings scopes: generated by make docs from daemon/localsetup/settings.go -->"
	scopesEnd   = "<!-- end of settings scopes -->"
)

// ScopesSection is the table doc carries between its markers.
func ScopesSection(doc string) (string, bool) { return docsection.Get(doc, scopesBegin, scopesEnd) }

// WithScopesTable is doc with the scopes table between its markers made
// anew (make docs); doc unchanged, false, when it has no markers.
func WithScopesTable(doc string) (string, bool) {
	return docsection.Set(doc, scopesBegin, scopesEnd, ScopesTable())
}
