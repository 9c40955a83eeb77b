package app

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/api"
	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/monitor"
	"github.com/tunnelsvc/tunnelsvc/daemon/notify"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/totp"
)

// CaddyCertGlob is where Debian's caddy keeps the certificates it obtains
// (its data directory, /var/lib/caddy/.local/share/caddy).
const CaddyCertGlob = "/var/lib/caddy/.local/share/caddy/certificates/*/*/*.crt"

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
// notifier. start runs the collector and the watcher until its ctx ends.
func (a *App) monitoringServices(ctx context.Context) (mon api.Monitoring, start func(context.Context), err error) {
	d, err := a.frpsDashboard(ctx)
	if err != nil {
		return api.Monitoring{}, nil, err
	}
	traffic := &monitor.Traffic{Store: a.Store, Log: a.Log, Now: time.Now,
		FRPS: &monitor.FRPS{Addr: a.Config.FRPSDashboardListen, User: d.User, Password: d.Password}}
	tokens := &monitor.Tokens{Store: a.Store, Now: time.Now}
	metrics := monitor.New(monitor.Options{Store: a.Store, Tokens: tokens, Traffic: traffic, Hub: a.Hub, Log: a.Log, Version: a.Config.Version,
		Jails: monitor.BannerJails(a.Banner)})
	sender := &notify.Sender{Store: a.Store, Log: a.Log, Now: time.Now}
	watcher := &notify.Watcher{Store: a.Store, Sender: sender, Log: a.Log, Now: time.Now,
		CertGlobs:         []string{a.Config.SystemPath(CaddyCertGlob), a.Config.SystemPath(revtunnel.ServerCertPath)},
		LoginFailureKinds: []string{audit.LoginFailed, audit.LoginRateLimited, totp.KindLoginFailed},
		Jails:             notify.BannerJails(a.Banner)}
	start = func(ctx context.Context) {
		go traffic.Run(ctx)
		go watcher.Run(ctx)
	}
	return api.Monitoring{Metrics: metrics, Tokens: tokens, Traffic: traffic, Notify: sender}, start, nil
}
