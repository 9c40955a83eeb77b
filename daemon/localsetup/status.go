package localsetup

import (
	"context"
	"strings"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// UnitStatus is one managed unit's state, or why it is unknown.
type UnitStatus struct {
	ActiveState string    `json:"active_state,omitempty"`
	SubState    string    `json:"sub_state,omitempty"`
	Since       time.Time `json:"since,omitzero"`
	Error       string    `json:"error,omitempty"`
}

// Status is GET /api/local/status's answer.
type Status struct {
	Domain           string                `json:"domain"`
	ServerHost       string                `json:"server_host"`
	Webproxy         string                `json:"webproxy"` // installed, skipped, not_installed
	InstalledAt      time.Time             `json:"installed_at,omitzero"`
	Units            map[string]UnitStatus `json:"units"`
	Versions         map[string]string     `json:"versions"`
	FirewallMode     string                `json:"firewall_mode"`
	DashboardPrivate bool                  `json:"dashboard_private"`
	BindIP           string                `json:"bind_ip"`
	// ACMECA is the ACME directory certificates come from (Let's Encrypt
	// until another is set).
	ACMECA     string             `json:"acme_ca"`
	ACMECARoot string             `json:"acme_ca_root"`
	Operation  string             `json:"operation,omitempty"`
	Outcomes   map[string]Outcome `json:"outcomes"`
	// Missing lists the recommended packages that are not installed.
	Missing []MissingPart `json:"missing"`
	// Database is the database the daemon runs on.
	Database DatabaseStatus `json:"database"`
}

// DatabaseStatus says which database the daemon runs on: SQLite's file, or
// PostgreSQL's URL with the password redacted.
type DatabaseStatus struct {
	Engine string `json:"engine"` // sqlite or postgres
	URL    string `json:"url"`    // redacted; empty for sqlite
	Path   string `json:"path"`   // the SQLite file; empty for postgres
}

// Status gathers the settings, unit states and tool versions.
func (s *Service) Status(ctx context.Context) (Status, error) {
	st := Status{Webproxy: "not_installed", Units: map[string]UnitStatus{}, Versions: map[string]string{}, Database: s.Database}
	v, err := s.Settings.VPS(ctx)
	if err != nil {
		return st, err
	}
	if st.Domain, err = s.Settings.Domain(ctx); err != nil {
		return st, err
	}
	if v != nil {
		st.ServerHost = v.ServerHost
		st.InstalledAt = v.InstalledAt
		switch {
		case v.SkipWebproxy:
			st.Webproxy = "skipped"
		case !v.InstalledAt.IsZero():
			st.Webproxy = "installed"
		}
	}
	if st.FirewallMode, err = s.Settings.FirewallMode(ctx); err != nil {
		return st, err
	}
	if st.FirewallMode == "" {
		st.FirewallMode = "none"
	}
	if st.DashboardPrivate, err = s.Settings.DashboardPrivate(ctx); err != nil {
		return st, err
	}
	if st.BindIP, err = s.Settings.BindIP(ctx); err != nil {
		return st, err
	}
	acme, err := s.Settings.ACME(ctx)
	if err != nil {
		return st, err
	}
	st.ACMECA, st.ACMECARoot = acme.CA, acme.CARoot
	st.Operation, _ = s.Hub.Running()
	if st.Outcomes, err = s.Settings.Outcomes(ctx); err != nil {
		return st, err
	}
	for _, u := range units.Managed {
		name := strings.TrimSuffix(u, ".service")
		us, err := s.Units.State(ctx, u)
		if err != nil {
			st.Units[name] = UnitStatus{Error: units.Explain(err)}
			continue
		}
		st.Units[name] = UnitStatus{ActiveState: us.ActiveState, SubState: us.SubState, Since: us.Since}
	}
	st.Versions["caddy"] = s.version(ctx, "caddy", "version")
	st.Versions["frps"] = s.version(ctx, s.FRPS, "--version")
	st.Missing = s.MissingParts(ctx)
	return st, nil
}

// version asks a tool for its version; "" when it is absent or says
// nothing. An answer is kept while the tool's file is the same (an upgrade
// asks again); an absent tool is asked every time, so installing it shows.
func (s *Service) version(ctx context.Context, tool string, arg string) string {
	if tool == "" {
		return ""
	}
	key := tool + " " + arg
	if v, ok := s.versions.Get(s.Run, key); ok {
		return v
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	res := s.Run.Run(ctx, tool, arg)
	if res.Err != nil {
		return ""
	}
	f := strings.Fields(res.Stdout)
	if len(f) == 0 {
		return ""
	}
	s.versions.Put(s.Run, key, f[0], tool)
	return f[0]
}
