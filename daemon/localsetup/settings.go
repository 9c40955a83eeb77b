// Package localsetup is the VPS's own set-up: the domain and server host,
// installing the web proxy and the tunnel server, and the settings that
// shape their configuration (bind address, private dashboard).
package localsetup

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Settings keys.
const (
	keyVPS              = "vps"
	keyDomain           = "domain"
	keyBindIP           = "bind_ip"
	keyDashboardPrivate = "dashboard_private"
	// KeyFirewallMode is owned by the firewall package; status reports it.
	KeyFirewallMode = "firewall_mode"
)

// VPS is the stored record of an installation.
type VPS struct {
	Domain       string    `json:"domain"`
	ServerHost   string    `json:"server_host"`
	SkipWebproxy bool      `json:"skip_webproxy"`
	InstalledAt  time.Time `json:"installed_at,omitzero"`
}

// Settings reads and writes the set-up settings.
type Settings struct{ Store *store.Store }

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

// BindIP is the address public listeners bind to; "" means all.
func (s Settings) BindIP(ctx context.Context) (string, error) { return s.get(ctx, keyBindIP) }

// SetBindIP stores (or with "" clears) the bind address.
func (s Settings) SetBindIP(ctx context.Context, ip string) error {
	return s.Store.SetSetting(ctx, keyBindIP, ip)
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

// FirewallMode is svc, manual, none, or "" when never chosen.
func (s Settings) FirewallMode(ctx context.Context) (string, error) {
	return s.get(ctx, KeyFirewallMode)
}
