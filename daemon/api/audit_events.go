package api

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
)

// Audit kinds of dashboard changes (authentication kinds live with auth,
// totp and sshkeys). Their prefix decides their category (audit.Category).
const (
	auditMachineRegistered = "MACHINE_REGISTERED"
	auditMachineRenamed    = "MACHINE_RENAMED"
	auditMachineDeleted    = "MACHINE_DELETED"
	auditAgentRestart      = "AGENT_TUNNEL_RESTARTED"
	auditTunnelCreated     = "TUNNEL_CREATED"
	auditTunnelUpdated     = "TUNNEL_UPDATED"
	auditTunnelDeleted     = "TUNNEL_DELETED"
	auditTokenCreated      = "TOKEN_CREATED"
	auditTokenRevoked      = "TOKEN_REVOKED"
	auditSettingsChanged   = "SETTINGS_CHANGED"
	auditInstallStarted    = "INSTALL_STARTED"
	auditFirewallChanged   = "FIREWALL_CHANGED"
	auditBannerSetup       = "BANNER_SETUP_STARTED"
	auditBannerConfig      = "BANNER_CONFIG_CHANGED"
	auditBannerUnbanned    = "BANNER_UNBANNED"
	auditBannerAllowed     = "BANNER_WHITELIST_ADDED"
	auditBannerDisallowed  = "BANNER_WHITELIST_REMOVED"
)

// record writes an audit entry for a change this request made, with the
// client's address and user agent. Without a recorder it does nothing.
func (s *Server) record(r *http.Request, kind, detail string) {
	if s.audit == nil {
		return
	}
	c := client(r)
	s.audit.Record(r.Context(), audit.Event{Kind: kind, Client: c.Addr, UserAgent: c.UserAgent, Detail: detail})
}

func tokenDetail(what string, id int64, label string) string {
	if label == "" {
		return fmt.Sprintf("join token #%d %s", id, what)
	}
	return fmt.Sprintf("join token %q %s", label, what)
}

// tunnelTarget says where a tunnel leads, for the audit log.
func tunnelTarget(t machines.Tunnel) string {
	s := fmt.Sprintf("local port %d", t.LocalPort)
	if t.Subdomain != nil && *t.Subdomain != "" {
		s += ", subdomain " + *t.Subdomain
	}
	if t.Public {
		s += ", public"
	}
	return s
}

// tunnelChanges lists what an update changed.
func tunnelChanges(old, t machines.Tunnel) string {
	var ch []string
	if old.Name != t.Name {
		ch = append(ch, fmt.Sprintf("name %q → %q", old.Name, t.Name))
	}
	if old.LocalPort != t.LocalPort {
		ch = append(ch, fmt.Sprintf("local port %d → %d", old.LocalPort, t.LocalPort))
	}
	if sub(old) != sub(t) {
		ch = append(ch, fmt.Sprintf("subdomain %q → %q", sub(old), sub(t)))
	}
	if old.Public != t.Public {
		ch = append(ch, fmt.Sprintf("public %t → %t", old.Public, t.Public))
	}
	if len(ch) == 0 {
		return "nothing"
	}
	return strings.Join(ch, ", ")
}

func sub(t machines.Tunnel) string {
	if t.Subdomain == nil {
		return ""
	}
	return *t.Subdomain
}
