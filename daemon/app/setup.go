package app

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"path/filepath"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/logstream"
	"github.com/tunnelsvc/tunnelsvc/daemon/netcheck"
	"github.com/tunnelsvc/tunnelsvc/daemon/publish"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

// CaddyfilePath is the managed Caddyfile; the package's drop-in for
// caddy.service points Caddy at it (Debian's /etc/caddy/Caddyfile is a
// conffile of the caddy package and is left alone).
const CaddyfilePath = "/etc/tunnelsvc/Caddyfile"

// setupServices builds the VPS set-up: the log hub, the network checks and
// the web proxy. dashboard is the daemon's own listener address.
func (a *App) setupServices(dashboard net.Addr) {
	cfg := a.Config
	// Background operations' outcomes are kept; an operation running here
	// is followed from any edge's dashboard, and one running on another
	// edge from this one's.
	a.Hub = logstream.NewHubWith(a.Now, logstream.Hooks{
		OnDone: func(op string, ok bool, msg string) { a.Setup.RecordOperation(op, ok, msg) },
		Relay: func(m logstream.Message) {
			m.Edge = cfg.EdgeName
			if b, err := json.Marshal(m); err == nil {
				a.Store.PublishLog(string(b))
			}
		},
	})
	a.Net = &netcheck.Checker{DNSServer: cfg.DNSServer, EchoURLs: cfg.EchoURLs}
	a.Setup = &localsetup.Service{
		Settings: a.settings(),
		Life:     a.life,
		Proxy:    &webproxy.Deployer{Path: cfg.SystemPath(CaddyfilePath), Run: cmdrun.Exec{}, Units: a.Units},
		// Imported by ours, so installing us drops none of the operator's sites.
		OperatorCaddyfile: cfg.SystemPath("/etc/caddy/Caddyfile"),
		Units:             a.Units,
		Tunnels:           localsetup.StoreTunnels{Store: a.Store},
		TunnelServer:      reconciler{a.Revtunnel, a.Publish},
		Hub:               a.Hub,
		Dashboard:         func() string { return loopbackOf(dashboard) },
		Gate:              cfg.GateListen,
		WSS:               a.WSSCert.Site,
		Firewall:          a.Firewall,
		BanTool:           a.Banner.Parts,
		OtherEdges:        a.otherEdges,
		Run:               cmdrun.Exec{},
		FRPS:              filepath.Join(cfg.BinDir, "frps"),
		Database:          DatabaseStatus(cfg),
		Log:               a.Log,
		Now:               a.Now,
	}
}

// loopbackOf turns a listener address into one the proxy on this box can
// dial: a wildcard address becomes loopback.
func loopbackOf(addr net.Addr) string {
	if addr == nil {
		return "127.0.0.1:7380"
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ap.Addr().IsUnspecified() {
		lo := netip.MustParseAddr("127.0.0.1")
		if ap.Addr().Is6() && !ap.Addr().Is4In6() {
			lo = netip.IPv6Loopback()
		}
		return netip.AddrPortFrom(lo, ap.Port()).String()
	}
	return ap.String()
}

// reconciler adapts the frps deployer and the publishing of public tcp
// tunnels (which follows bind_ip) to the set-up's TunnelServer.
type reconciler struct {
	d *revtunnel.Deployer
	p *publish.Service
}

func (r reconciler) Reconcile(ctx context.Context) error {
	if _, err := r.d.Reconcile(ctx); err != nil {
		return err
	}
	err := r.p.Reconcile(ctx)
	if errors.Is(err, publish.ErrIPv6Bind) {
		// bind_ip is the operator's input: a 400, and the old one is kept.
		return localsetup.InputError(err.Error())
	}
	return err
}

// settings are the stored settings as this edge reads them: the host
// settings (server host, bind address, firewall mode) its own.
func (a *App) settings() localsetup.Settings {
	return localsetup.Settings{Store: a.Store, Edge: a.Config.EdgeName}
}
