package app

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/health"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/monitor"
	"github.com/tunnelsvc/tunnelsvc/daemon/notify"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/totp"
)

// frpsDashboard is frps's dashboard API as server.toml declares it: on
// --frps-dashboard-listen (loopback), with the sealed generated password.
func (a *App) frpsDashboard(ctx context.Context) (*frpconf.Dashboard, error) {
	pw, err := monitor.DashboardPassword(ctx, a.Store, a.Sealer)
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(a.Config.FRPSDashboardListen)
	if err != nil {
		return nil, err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, err
	}
	return &frpconf.Dashboard{Addr: host, Port: p, User: frpconf.DashboardUser, Password: pw}, nil
}

// monitoringServices builds /metrics, the traffic collector and the
// notifier, and adds the collector and the watcher to a.Loops.
func (a *App) monitoringServices(ctx context.Context, minute time.Duration) error {
	d, err := a.frpsDashboard(ctx)
	if err != nil {
		return err
	}
	traffic := &monitor.Traffic{Store: a.Store, Log: a.Log, Now: a.Now,
		FRPS: &monitor.FRPS{Addr: a.Config.FRPSDashboardListen, User: d.User, Password: d.Password}}
	if a.Store.Engine() == "postgres" {
		traffic.Edge = a.Config.EdgeName
	}
	tokens := &monitor.Tokens{Store: a.Store, Now: a.Now}
	metrics := monitor.New(monitor.Options{Store: a.Store, Tokens: tokens, Traffic: traffic, Hub: a.Hub, Log: a.Log, Version: a.Config.Version,
		Jails: monitor.BannerJails(a.Banner)})
	sender := &notify.Sender{Store: a.Store, Log: a.Log, Now: a.Now, Life: a.life}
	a.Notifier = sender
	watcher := &notify.Watcher{Store: a.Store, Sender: sender, Log: a.Log, Now: a.Now, Edge: a.Config.EdgeName,
		Sites:             a.httpsSites,
		Status:            a.machineStatus,
		LoginFailureKinds: []string{audit.LoginFailed, audit.LoginRateLimited, totp.KindLoginFailed},
		Jails:             notify.BannerJails(a.Banner),
		Space:             a.Store.Space,
		Lease:             a.leaseFence("notifications", 3*notify.DefaultCheckInterval)}
	if minute > 0 {
		watcher.Minute, watcher.Interval = minute, time.Duration(float64(notify.DefaultCheckInterval)*float64(minute)/float64(time.Minute))
	}
	a.frps = traffic.FRPS
	a.Loops.Loop("traffic collector", func(ctx context.Context) error { traffic.Run(ctx); return nil })
	a.Loops.Loop("edge connections", a.watchConnections)
	a.Loops.Loop("notification watcher", func(ctx context.Context) error { watcher.Run(ctx); return nil })
	// The targets of sites served by several machines, checked as Caddy
	// checks them, for the dashboard's words and the notifications.
	checker := &health.Checker{Store: a.Store, Log: a.Log, Now: a.Now, Domain: localsetup.Settings{Store: a.Store}.Domain,
		Notify: sender.Notify, Lease: a.lease("health events", 3*time.Minute)}
	a.targetChecks = checker
	a.Loops.Loop("health checks", func(ctx context.Context) error { checker.Run(ctx); return nil })
	a.Metrics, a.Tokens, a.Traffic = metrics, tokens, traffic
	return nil
}

// httpsSites is where Caddy serves HTTPS (bind_ip, else loopback) and the
// names it holds certificates for: router.<domain> and every HTTP
// tunnel's <sub>.<domain>. Nothing before the web proxy is installed.
func (a *App) httpsSites(ctx context.Context) (string, []string, error) {
	set := a.settings()
	v, err := set.VPS(ctx)
	if err != nil || v == nil || v.SkipWebproxy || v.Domain == "" {
		return "", nil, err
	}
	host := "127.0.0.1"
	if bind, err := set.BindIP(ctx); err != nil {
		return "", nil, err
	} else if bind != "" {
		host = bind
	}
	names := []string{"router." + v.Domain}
	ts, err := a.Store.ListTunnels(ctx, 0)
	if err != nil {
		return "", nil, err
	}
	for _, t := range ts {
		if t.Kind == "http" && t.Subdomain != "" {
			names = append(names, t.Subdomain+"."+v.Domain)
		}
	}
	// The tunnels' own domains: Caddy holds their certificates too.
	own, err := a.Store.TunnelDomains(ctx)
	if err != nil {
		return "", nil, err
	}
	for _, t := range ts {
		if t.Kind == "http" && !t.Paused {
			names = append(names, own[t.ID]...)
		}
	}
	return net.JoinHostPort(host, "443"), names, nil
}
