package app

import (
	"context"
	"net"
	"strconv"

	"github.com/tunnelsvc/tunnelsvc/daemon/banner"
	"github.com/tunnelsvc/tunnelsvc/daemon/firewall"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// FirewallRulesetPath is where the svc ruleset is kept (also loadable by
// hand with nft -f).
const FirewallRulesetPath = "/etc/tunnelsvc/firewall.nft"

// guardServices builds the ban tool and the firewall; the firewall follows
// the tunnels and settings (dashboard listener: dashboard).
func (a *App) guardServices(dashboard net.Addr) {
	cfg := a.Config
	a.Banner = banner.New(banner.Options{
		Store: a.Store, Run: a.hostTools, Log: a.Log,
		ConfDir: cfg.SystemPath("/etc/fail2ban"),
		Units:   reloadOrStart{a.Units},
	})
	a.Firewall = firewall.New(firewall.Options{
		Store: a.Store, Run: a.hostTools, Log: a.Log, Edge: cfg.EdgeName,
		RulesetPath: cfg.SystemPath(FirewallRulesetPath),
		Ports: func(ctx context.Context) (firewall.Ports, error) {
			return a.firewallPorts(ctx, dashboard)
		},
	})
}

// firewallPorts is what the svc ruleset follows: the tunnel server's control
// port, every machine's and tunnel's port (private unless a public tcp
// tunnel), the dashboard's port and the settings.
func (a *App) firewallPorts(ctx context.Context, dashboard net.Addr) (firewall.Ports, error) {
	p := firewall.Ports{ControlPort: a.Config.FRPSPort}
	if dashboard != nil {
		if _, port, err := net.SplitHostPort(dashboard.String()); err == nil {
			p.DashboardPort, _ = strconv.Atoi(port)
		}
	}
	var err error
	if p.DashboardPrivate, err = a.Setup.Settings.DashboardPrivate(ctx); err != nil {
		return p, err
	}
	if p.BindIP, err = a.Setup.Settings.BindIP(ctx); err != nil {
		return p, err
	}
	ms, err := a.Store.ListMachines(ctx)
	if err != nil {
		return p, err
	}
	for _, m := range ms {
		p.PrivatePorts = append(p.PrivatePorts, m.TunnelPort, m.AgentPort)
	}
	ts, err := a.Store.ListTunnels(ctx, 0)
	if err != nil {
		return p, err
	}
	// The other machines' ports of sites served by several.
	targets, err := a.Store.ListTargets(ctx, 0)
	if err != nil {
		return p, err
	}
	for _, t := range targets {
		p.PrivatePorts = append(p.PrivatePorts, t.RemotePort)
	}
	for _, t := range ts {
		// A paused public tunnel is closed like a private one.
		switch {
		case t.Kind == "tcp" && t.Public && !t.Paused:
			p.PublicTCPPorts = append(p.PublicTCPPorts, t.RemotePort)
		case t.Kind == "udp" && t.Public && !t.Paused:
			p.PublicUDPPorts = append(p.PublicUDPPorts, t.RemotePort)
		case t.Kind == "udp":
			// Nothing to drop: frps's UDP listener is on loopback.
		default:
			p.PrivatePorts = append(p.PrivatePorts, t.RemotePort)
		}
	}
	return p, nil
}

// reloadOrStart gives the ban tool "reload if running, else start" over the
// unit layer.
type reloadOrStart struct{ m units.Manager }

func (r reloadOrStart) ReloadOrRestart(ctx context.Context, name string) error {
	st, err := r.m.State(ctx, name)
	if err != nil {
		return err
	}
	if st.ActiveState == "active" || st.ActiveState == "reloading" {
		return r.m.Reload(ctx, name)
	}
	return r.m.Start(ctx, name)
}
