package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Audit kinds of dashboard changes (authentication kinds live with auth,
// totp and sshkeys). Their prefix decides their category (audit.Category).
const (
	auditMachineRegistered = "MACHINE_REGISTERED"
	auditMachineRenamed    = "MACHINE_RENAMED"
	auditMachineDeleted    = "MACHINE_DELETED"
	auditMachineRejoined   = "MACHINE_REJOINED"
	auditMachineTransport  = "MACHINE_TRANSPORT_CHOSEN"
	auditAgentRestart      = "AGENT_TUNNEL_RESTARTED"
	auditSpeedTest         = "MACHINE_SPEEDTEST_STARTED"
	auditTunnelCreated     = "TUNNEL_CREATED"
	auditTunnelUpdated     = "TUNNEL_UPDATED"
	auditTunnelDeleted     = "TUNNEL_DELETED"
	auditTunnelPaused      = "TUNNEL_PAUSED"
	auditTunnelResumed     = "TUNNEL_RESUMED"
	auditTokenCreated      = "TOKEN_CREATED"
	auditTokenRevoked      = "TOKEN_REVOKED"
	auditSettingsChanged   = "SETTINGS_CHANGED"
	auditInstallStarted    = "INSTALL_STARTED"
	auditFirewallChanged   = "FIREWALL_CHANGED"
	// auditFirewallTakeover + "_FINISHED" or "_FAILED": how the takeover
	// (mode svc) ended.
	auditFirewallTakeover = "FIREWALL_TAKEOVER"
	auditBannerSetup      = "BANNER_SETUP_STARTED"
	// auditBannerSetupEnd + "_FINISHED" or "_FAILED": how it ended.
	auditBannerSetupEnd   = "BANNER_SETUP"
	auditBannerConfig     = "BANNER_CONFIG_CHANGED"
	auditBannerUnbanned   = "BANNER_UNBANNED"
	auditBannerAllowed    = "BANNER_WHITELIST_ADDED"
	auditBannerDisallowed = "BANNER_WHITELIST_REMOVED"
	// auditStepUp: a session passed a step-up (sudo mode); failures are
	// totp.KindStepUpFailed.
	auditStepUp = "STEP_UP_SUCCESS"
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

// tunnelCreated and tunnelDeleted are the audit rows of a tunnel made or
// removed, through its route or a site file.
func tunnelCreated(t machines.Tunnel) string {
	return fmt.Sprintf("%s tunnel %q created on machine %q: %s", t.Kind, t.Name, t.MachineName, tunnelTarget(t))
}

func tunnelDeleted(t machines.Tunnel) string {
	return fmt.Sprintf("%s tunnel %q of machine %q deleted", t.Kind, t.Name, t.MachineName)
}

// recordTunnelUpdate records what an update of old (now t, asked as in)
// changed, and its pausing or resuming, each as a row of its own.
func (s *Server) recordTunnelUpdate(r *http.Request, old, t machines.Tunnel, in machines.TunnelInput) {
	if ch := tunnelChanges(old, t, in); ch != "" {
		s.record(r, auditTunnelUpdated, fmt.Sprintf("tunnel %q of machine %q changed: %s", old.Name, t.MachineName, ch))
	}
	switch {
	case t.Paused && !old.Paused:
		s.record(r, auditTunnelPaused, fmt.Sprintf("%s tunnel %q of machine %q paused", t.Kind, t.Name, t.MachineName))
	case !t.Paused && old.Paused:
		s.record(r, auditTunnelResumed, fmt.Sprintf("%s tunnel %q of machine %q resumed", t.Kind, t.Name, t.MachineName))
	}
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
	if t.Paused {
		s += ", paused"
	}
	return s
}

// changes collects what one request changed, each as "what old → new" in
// words, for the audit log. Secrets never go in: a password or token that
// changed is noted as such, without its value.
type changes []string

// add notes what when old and new differ.
func (c *changes) add(what, old, new string) {
	if old != new {
		*c = append(*c, what+" "+old+" → "+new)
	}
}

// note adds a change that has no old and new value to show.
func (c *changes) note(s string) { *c = append(*c, s) }

func (c changes) String() string { return strings.Join(c, "; ") }

// quoted is a name as the audit log shows it; "(none)" when empty.
func quoted(s string) string {
	if s == "" {
		return "(none)"
	}
	return fmt.Sprintf("%q", s)
}

// yesNo is a flag in words.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// accessWords is a tunnel's access mode in words.
func accessWords(a string) string {
	switch a {
	case gate.Operator:
		return "operators only"
	case gate.Password:
		return "shared password"
	case gate.Public, "":
		return "public"
	case gate.SSO:
		return "single sign-on"
	}
	return a
}

// gateWords is a tunnel's gate in words: its mode, and who may enter an
// SSO gate.
func gateWords(t machines.Tunnel) string {
	w := accessWords(t.Access)
	if t.Access == gate.SSO {
		return w + " (" + strings.Join(t.SSOAllow, ", ") + ")"
	}
	return w
}

// allowWords is an allow list in words: empty means any address.
func allowWords(ips []string) string {
	if len(ips) == 0 {
		return "any address"
	}
	return strings.Join(ips, ", ")
}

// tunnelChanges lists what an update changed, in; "" when nothing did.
// Pausing is recorded as an event of its own (TUNNEL_PAUSED, _RESUMED).
func tunnelChanges(old, t machines.Tunnel, in machines.TunnelInput) string {
	var c changes
	c.add("name", quoted(old.Name), quoted(t.Name))
	c.add("local port", fmt.Sprint(old.LocalPort), fmt.Sprint(t.LocalPort))
	c.add("subdomain", quoted(sub(old)), quoted(sub(t)))
	c.add("public", yesNo(old.Public), yesNo(t.Public))
	c.add("access", gateWords(old), gateWords(t))
	switch {
	case in.Password != nil && *in.Password != "" && old.HasPassword:
		c.note("password changed")
	case in.Password != nil && *in.Password != "":
		c.note("password set")
	case old.HasPassword && !t.HasPassword:
		c.note("password removed")
	}
	c.add("allow list", allowWords(old.AllowIPs), allowWords(t.AllowIPs))
	c.add("path rules", ruleWords(old.Rules), ruleWords(t.Rules))
	c.add("sign-ins last", rememberWords(old.RememberDays), rememberWords(t.RememberDays))
	c.add("other machines", targetWords(old.Targets), targetWords(t.Targets))
	c.add("balance", old.Balance, t.Balance)
	c.add("health check", healthWords(old.Health), healthWords(t.Health))
	c.add("own domains", domainWords(old.Domains), domainWords(t.Domains))
	c.add("PROXY protocol", proxyProtocolWords(old.ProxyProtocol), proxyProtocolWords(t.ProxyProtocol))
	c.add("fallback page", fallbackWords(old.Fallback), fallbackWords(t.Fallback))
	return c.String()
}

// ruleWords lists path rules in order ("/api/* allow, /admin* deny";
// "none").
func ruleWords(rules []store.AccessRule) string {
	if len(rules) == 0 {
		return "none"
	}
	parts := make([]string, len(rules))
	for i, r := range rules {
		parts[i] = r.Path + " " + r.Action
	}
	return strings.Join(parts, ", ")
}

// rememberWords is how long a gate's sign-in lasts.
func rememberWords(days int) string {
	switch days {
	case 0:
		return "a day"
	case 1:
		return "1 day"
	}
	return fmt.Sprintf("%d days", days)
}

// fallbackWords is a fallback page in words: its message, quoted and cut
// at 60 characters, or "none".
func fallbackWords(f *machines.FallbackView) string {
	if f == nil || f.Message == "" {
		return "none"
	}
	m := []rune(strings.ReplaceAll(f.Message, "\n", " "))
	if len(m) > 60 {
		return strconv.Quote(string(m[:60]) + "…")
	}
	return strconv.Quote(string(m))
}

// proxyProtocolWords is a tunnel's PROXY protocol setting in words.
func proxyProtocolWords(v string) string {
	if v == "" {
		return "off"
	}
	return v
}

// targetWords lists the machines serving a site besides its own
// ("standby:8081, nas-2:8080"; "none").
func targetWords(ts []machines.TargetView) string {
	if len(ts) < 2 {
		return "none"
	}
	var parts []string
	for _, t := range ts[1:] {
		parts = append(parts, fmt.Sprintf("%s:%d", t.MachineName, t.LocalPort))
	}
	return strings.Join(parts, ", ")
}

// healthWords is a health check in words ("none" when there is none).
func healthWords(h *machines.HealthView) string {
	if h == nil {
		return "none"
	}
	status := "any 2xx"
	if h.ExpectStatus != 0 {
		status = fmt.Sprint(h.ExpectStatus)
	}
	return fmt.Sprintf("GET %s every %d s, %s", h.Path, h.IntervalS, status)
}

// domainWords lists a tunnel's own domains ("none").
func domainWords(ds []machines.DomainView) string {
	if len(ds) == 0 {
		return "none"
	}
	var names []string
	for _, d := range ds {
		names = append(names, d.Name)
	}
	return strings.Join(names, ", ")
}

// recordChanges records c under kind, unless nothing changed.
func (s *Server) recordChanges(r *http.Request, kind string, c changes) {
	if len(c) > 0 {
		s.record(r, kind, c.String())
	}
}

// bindWords is the bind address in words: empty means every address.
func bindWords(ip string) string {
	if ip == "" {
		return "every address"
	}
	return ip
}

// acmeWords names the ACME CA: Let's Encrypt by name, another by its URL.
func acmeWords(ca string) string {
	if ca == "" || ca == localsetup.DefaultACMECA {
		return "Let's Encrypt"
	}
	return ca
}

// webhookWords shows a webhook URL without what may be its secret: a
// token often lives in the path or query, so only scheme and host are
// shown. Empty means notifications are off.
func webhookWords(raw string) string {
	if raw == "" {
		return "off"
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(unreadable URL)"
	}
	s := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		s += "/…"
	}
	return s
}

func sub(t machines.Tunnel) string {
	if t.Subdomain == nil {
		return ""
	}
	return *t.Subdomain
}
