package localsetup

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/netcheck"
)

// Checklist is the overview's getting-started list.
type Checklist struct {
	Items []ChecklistItem `json:"items"`
	// Next is the id of the first item not done (nil when all are).
	Next *string `json:"next"`
	// NextStep says what to do next ("" when all is done).
	NextStep string `json:"next_step"`
	PublicIP string `json:"public_ip"`
	DNSIP    string `json:"dns_ip"`
}

// ChecklistItem is one step.
type ChecklistItem struct {
	ID     string `json:"id"`
	Label  string `json:"label"`
	Done   bool   `json:"done"`
	Detail string `json:"detail"`
}

// NetChecks are the lookups the checklist makes (netcheck.Checker).
type NetChecks interface {
	CheckDNS(ctx context.Context, domain string) (netcheck.DNSResult, error)
	DetectIP(ctx context.Context) (string, error)
}

// PublicIPTTL is how long the checklist trusts a detected public address:
// detecting asks outside services (up to 4 s each), too slow for every
// load of the overview.
const PublicIPTTL = 10 * time.Minute

type ipCache struct {
	mu sync.Mutex
	ip string
	at time.Time
}

// detectIP is the public address, detected at most once per PublicIPTTL;
// "" when detection fails (a failure is not remembered).
func (s *Service) detectIP(ctx context.Context, net NetChecks) string {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	c := &s.publicIP
	c.mu.Lock()
	if c.ip != "" && now().Sub(c.at) < PublicIPTTL {
		defer c.mu.Unlock()
		return c.ip
	}
	c.mu.Unlock()
	ip, err := net.DetectIP(ctx)
	if err != nil || ip == "" {
		return ""
	}
	c.mu.Lock()
	c.ip, c.at = ip, now()
	c.mu.Unlock()
	return ip
}

// Checklist works out each step now: passwordSet comes from the caller,
// DNS and the public address are looked up, the rest is read from the store.
func (s *Service) Checklist(ctx context.Context, passwordSet bool, net NetChecks) (Checklist, error) {
	var c Checklist
	add := func(id, label string, done bool, detail string) {
		c.Items = append(c.Items, ChecklistItem{ID: id, Label: label, Done: done, Detail: detail})
		if !done && c.Next == nil {
			c.Next = &id
			c.NextStep = detail
		}
	}
	if passwordSet {
		add("password", "Password set", true, "the dashboard is protected by the operator password")
	} else {
		add("password", "Password set", false, "set the operator password")
	}

	domain, err := s.Settings.Domain(ctx)
	if err != nil {
		return c, err
	}
	var dnsDone bool
	var dnsDetail string
	switch {
	case domain == "":
		dnsDetail = "choose a domain in the set-up, and add a DNS A record for router.<domain> pointing at this server"
	case net == nil:
		dnsDetail = "DNS checks are not available in this daemon"
	default:
		res, err := net.CheckDNS(ctx, domain)
		if err != nil {
			return c, err
		}
		c.PublicIP = s.detectIP(ctx, net)
		switch {
		case !res.OK:
			dnsDetail = res.Message
		case c.PublicIP == "":
			c.DNSIP = res.ResolvedTo
			dnsDone = true
			dnsDetail = fmt.Sprintf("%s resolves to %s (this server's public IP could not be detected to compare)", res.Host, res.ResolvedTo)
		case res.ResolvedTo != c.PublicIP:
			c.DNSIP = res.ResolvedTo
			dnsDetail = fmt.Sprintf("%s resolves to %s, but this server's public IP is %s: point the DNS record at %s", res.Host, res.ResolvedTo, c.PublicIP, c.PublicIP)
		default:
			c.DNSIP = res.ResolvedTo
			dnsDone = true
			dnsDetail = fmt.Sprintf("%s resolves to %s, this server's public IP", res.Host, res.ResolvedTo)
		}
	}
	add("domain_dns", "Domain and DNS", dnsDone, dnsDetail)

	v, err := s.Settings.VPS(ctx)
	if err != nil {
		return c, err
	}
	switch {
	case v != nil && v.SkipWebproxy:
		add("webproxy", "Proxy installed", true, "the web proxy was skipped; machines reach the tunnel server at "+v.ServerHost)
	case v != nil && !v.InstalledAt.IsZero():
		add("webproxy", "Proxy installed", true, "Caddy and the tunnel server are installed")
	default:
		add("webproxy", "Proxy installed", false, "install the web proxy and the tunnel server in the set-up")
	}

	st := s.Settings.Store
	ms, err := st.ListMachines(ctx)
	if err != nil {
		return c, err
	}
	var joined, registered string
	for _, m := range ms {
		if !m.LastSeen.IsZero() && joined == "" {
			joined = m.Name
		}
		if registered == "" {
			registered = m.Name
		}
	}
	switch {
	case joined != "":
		add("machine", "First machine joined", true, fmt.Sprintf("machine %q has connected", joined))
	case registered != "":
		add("machine", "First machine joined", false, fmt.Sprintf("machine %q registered but never connected: check revtunnel-client on it (journalctl -u revtunnel-client)", registered))
	default:
		add("machine", "First machine joined", false, "create a join token on the Machines page and run its command on the machine")
	}

	ts, err := st.ListTunnels(ctx, 0)
	if err != nil {
		return c, err
	}
	probes, err := st.TunnelProbes(ctx)
	if err != nil {
		return c, err
	}
	var up, anyHTTP string
	for _, t := range ts {
		if t.Kind != "http" {
			continue
		}
		if anyHTTP == "" {
			anyHTTP = t.Subdomain
		}
		if p, ok := probes[t.ID]; ok && p.State == "up" && up == "" {
			up = t.Subdomain
		}
	}
	switch {
	case up != "":
		add("tunnel", "First tunnel reachable", true, fmt.Sprintf("https://%s.%s answers", up, domain))
	case anyHTTP != "" && domain == "":
		add("tunnel", "First tunnel reachable", false, fmt.Sprintf("http tunnel %q answers at https://%s.<domain> once a domain is set", anyHTTP, anyHTTP))
	case anyHTTP != "":
		add("tunnel", "First tunnel reachable", false, fmt.Sprintf("no http tunnel answered through the proxy yet (e.g. %s.%s); check that the service runs on the machine, then probe again", anyHTTP, domain))
	default:
		add("tunnel", "First tunnel reachable", false, "add an http tunnel to a machine on the Tunnels page")
	}
	return c, nil
}
