package firewall

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
)

// Table is our nftables table; we never touch any other.
const Table = "inet tunnelsvc"

// Ports is what the svc ruleset is rendered from. The tunnels and settings
// packages provide it (see Options.Ports).
type Ports struct {
	// ControlPort is the tunnel server's control port machines connect to.
	ControlPort int
	// PrivatePorts are tunnel ports reachable only from the box itself.
	PrivatePorts []int
	// PublicTCPPorts are public TCP tunnel ports.
	PublicTCPPorts []int
	// PublicUDPPorts are public UDP tunnel ports. Private UDP tunnel
	// ports need no rule: frps listens on loopback, and only package
	// publish's DNAT of a public port reaches it.
	PublicUDPPorts []int
	// DashboardPort is the dashboard's own listener (0 when unknown).
	DashboardPort int
	// DashboardPrivate keeps the dashboard port loopback-only (spec §2,
	// "Server ports setting").
	DashboardPrivate bool
	// BindIP, when set, is the only address public TCP tunnels are
	// accepted on.
	BindIP string
}

// alwaysOpen are the ports svc mode always accepts: SSH and the web proxy.
var alwaysOpen = []int{22, 80, 443}

// Plan is what the svc ruleset lets in, worked out before it is rendered,
// so the dashboard can show it (and warn) before the operator commits.
type Plan struct {
	// OpenTCP are accepted from anywhere: SSH, the web proxy, the tunnel
	// server's control port, the dashboard unless private.
	OpenTCP []int `json:"open_tcp"`
	// OpenUDP: HTTP/3 (443) unless 443 is private.
	OpenUDP []int `json:"open_udp"`
	// PublicTunnelTCP are public tcp tunnels, accepted on BindIP when set.
	PublicTunnelTCP []int `json:"public_tunnel_tcp"`
	// PublicTunnelUDP are public udp tunnels, accepted on BindIP when set.
	PublicTunnelUDP []int  `json:"public_tunnel_udp"`
	BindIP          string `json:"bind_ip"`
	// PrivateTCP are dropped unless they come from the box itself.
	PrivateTCP []int `json:"private_tcp"`
	// DashboardPort is the dashboard's listener; DashboardPrivate says it
	// is among PrivateTCP.
	DashboardPort    int  `json:"dashboard_port"`
	DashboardPrivate bool `json:"dashboard_private"`

	bind netip.Addr
}

// MakePlan checks p and works out what svc mode accepts.
func MakePlan(p Ports) (Plan, error) {
	check := func(what string, ports ...int) error {
		for _, n := range ports {
			if err := validate.Port(n); err != nil {
				return fmt.Errorf("%s %w", what, err)
			}
		}
		return nil
	}
	if err := check("private tunnel port", p.PrivatePorts...); err != nil {
		return Plan{}, err
	}
	if err := check("public tunnel port", p.PublicTCPPorts...); err != nil {
		return Plan{}, err
	}
	if err := check("public udp tunnel port", p.PublicUDPPorts...); err != nil {
		return Plan{}, err
	}
	var open []int
	open = append(open, alwaysOpen...)
	if p.ControlPort != 0 {
		if err := check("control port", p.ControlPort); err != nil {
			return Plan{}, err
		}
		open = append(open, p.ControlPort)
	}
	private := slices.Clone(p.PrivatePorts)
	if p.DashboardPort != 0 {
		if err := check("dashboard port", p.DashboardPort); err != nil {
			return Plan{}, err
		}
		if p.DashboardPrivate {
			private = append(private, p.DashboardPort)
		} else {
			open = append(open, p.DashboardPort)
		}
	}
	var bind netip.Addr
	if p.BindIP != "" {
		a, err := validate.IP(p.BindIP)
		if err != nil {
			return Plan{}, fmt.Errorf("bind ip %q is not an IP address", p.BindIP)
		}
		bind = a.Unmap()
	}
	// A private port wins over every accept: it is dropped first.
	open = slices.DeleteFunc(sortedUnique(open), func(n int) bool { return slices.Contains(private, n) })
	public := slices.DeleteFunc(sortedUnique(p.PublicTCPPorts), func(n int) bool {
		return slices.Contains(private, n) || slices.Contains(open, n)
	})
	// UDP has no open ports but 443 (HTTP/3), which no tunnel port is.
	publicUDP := slices.DeleteFunc(sortedUnique(p.PublicUDPPorts), func(n int) bool { return n == 443 })
	private = sortedUnique(private)
	pl := Plan{OpenTCP: open, OpenUDP: []int{}, PublicTunnelTCP: public, PublicTunnelUDP: publicUDP, PrivateTCP: private,
		DashboardPort: p.DashboardPort, DashboardPrivate: p.DashboardPrivate && p.DashboardPort != 0, bind: bind}
	if pl.PublicTunnelTCP == nil {
		pl.PublicTunnelTCP = []int{}
	}
	if pl.PublicTunnelUDP == nil {
		pl.PublicTunnelUDP = []int{}
	}
	if pl.PrivateTCP == nil {
		pl.PrivateTCP = []int{}
	}
	if !slices.Contains(private, 443) {
		pl.OpenUDP = []int{443}
	}
	if bind.IsValid() {
		pl.BindIP = bind.String()
	}
	return pl, nil
}

// Render returns the nft script for svc mode. It replaces our table in one
// transaction (the add-then-delete idiom works whether or not the table
// exists) and touches nothing else.
func Render(p Ports) (string, error) {
	pl, err := MakePlan(p)
	if err != nil {
		return "", err
	}
	open, public, private, bind := pl.OpenTCP, pl.PublicTunnelTCP, pl.PrivateTCP, pl.bind

	var b strings.Builder
	b.WriteString(`# Managed by tunnelsvc (firewall mode "svc"): rewritten from the dashboard's
# tunnels and settings on every change. Other tables are never touched.
# Undo by hand: nft delete table inet tunnelsvc
table inet tunnelsvc
delete table inet tunnelsvc
table inet tunnelsvc {
	chain input {
		type filter hook input priority filter; policy drop;
		iif "lo" accept
		ct state established,related accept
		ct state invalid drop
`)
	if len(private) > 0 {
		fmt.Fprintf(&b, "\t\ttcp dport %s drop comment \"private: loopback only\"\n", set(private))
	}
	b.WriteString(`		meta l4proto { icmp, ipv6-icmp } accept
		udp sport 67 udp dport 68 accept comment "DHCP client"
		udp sport 547 udp dport 546 accept comment "DHCPv6 client"
`)
	fmt.Fprintf(&b, "\t\ttcp dport %s accept\n", set(open))
	if len(pl.OpenUDP) > 0 {
		b.WriteString("\t\tudp dport 443 accept comment \"HTTP/3\"\n")
	}
	for _, pub := range []struct {
		proto, comment string
		ports          []int
	}{{"tcp", "public tunnels", public}, {"udp", "public udp tunnels", pl.PublicTunnelUDP}} {
		if len(pub.ports) == 0 {
			continue
		}
		switch {
		case !bind.IsValid():
			fmt.Fprintf(&b, "\t\t%s dport %s accept comment %q\n", pub.proto, set(pub.ports), pub.comment)
		case bind.Is4():
			// The original destination: package publish DNATs these
			// packets to frps's listener on 127.0.0.1 before input.
			fmt.Fprintf(&b, "\t\tct original ip daddr %s %s dport %s accept comment %q\n", bind, pub.proto, set(pub.ports), pub.comment)
		default:
			fmt.Fprintf(&b, "\t\tip6 daddr %s %s dport %s accept comment %q\n", bind, pub.proto, set(pub.ports), pub.comment)
		}
	}
	b.WriteString("\t}\n}\n")
	return b.String(), nil
}

// removeScript deletes our table, and succeeds when it is already gone.
const removeScript = "table inet tunnelsvc\ndelete table inet tunnelsvc\n"

func sortedUnique(ns []int) []int {
	out := slices.Clone(ns)
	slices.Sort(out)
	return slices.Compact(out)
}

func set(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return "{ " + strings.Join(s, ", ") + " }"
}
