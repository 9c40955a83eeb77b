package app

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/health"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/publish"
	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
)

// noKeys stands in until the SSH key store is wired: registration then fails
// with a clear message instead of handing out a machine without a key.
type noKeys struct{}

func (noKeys) DefaultPublicKey(context.Context) (string, error) {
	return "", errors.New("no default SSH key is configured on the VPS")
}

// tunnelServices builds the machines domain, the frps plugin and the
// server-config deployer. keys and units may be nil.
func (a *App) tunnelServices(keys machines.KeySource, units revtunnel.UnitRestarter) {
	cfg := a.Config
	if keys == nil {
		keys = noKeys{}
	}
	ports := store.PortRange{Lo: cfg.TunnelPortLo, Hi: cfg.TunnelPortHi}
	ca := &tunnelca.Authority{Store: a.Store, Sealer: a.Sealer, Now: a.Now}
	// The machines' doors (bootstrap, rejoin, transport) have a limiter
	// of their own, shared by the edges of a cluster as the login's is:
	// N edges give a guesser no more tries than one.
	joins := auth.NewLimiter(a.Now)
	if a.Store.Engine() == "postgres" {
		joins.Shared = clusterFailures{store: a.Store, edge: cfg.EdgeName, scope: "join"}
	}
	a.Machines = &machines.Service{
		Store: a.Store, Sealer: a.Sealer, Keys: keys, Log: a.Log, Now: a.Now,
		Limiter: joins, Ports: ports,
		Reach: a.Reach, FRPSPort: cfg.FRPSPort, CA: ca,
		EdgeName: cfg.EdgeName, ClusterEdges: a.clusterEdges, TunnelVersion: a.edge.TunnelVersion,
		// Its hooks, each resolved when called: the services they name are
		// built after it, and New returns before any is called.
		OnChange:      a.gateNow,
		Exposure:      a.exposure,
		BundleVersion: func() (string, error) { return a.Fleet.ServerVersion() },
		Desire:        func(ctx context.Context, id int64) error { return a.Delivery.Desire(ctx, id) },
		Health:        targetHealth{a},
	}
	// Machines on the wss transport come through the web proxy on 443 and
	// the gate listener; the bridge carries them on to frps over TLS.
	a.Bridge = &revtunnel.Bridge{Log: a.Log, Dial: revtunnel.TLSDialer(
		func(context.Context) (string, error) {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.FRPSPort)), nil
		},
		func(ctx context.Context) ([]byte, error) {
			c, err := ca.Load(ctx)
			if err != nil {
				return nil, err
			}
			return c.CertPEM, nil
		})}
	a.WSSCert = &revtunnel.WSSCert{CA: ca, CertPath: cfg.SystemPath(revtunnel.WSSCertPath), KeyPath: cfg.SystemPath(revtunnel.WSSKeyPath), Now: a.Now}
	// frps's plugin tells the delivery reconciler of every Login and Ping,
	// so a machine that is behind is delivered to as soon as it is heard
	// from; one whose frpc does not pin the tunnel CA gets its config and
	// a restart of frpc.
	a.Plugin = &revtunnel.Plugin{Store: a.Store, Log: a.Log, Now: a.Now, Edge: a.Edge, Bridge: a.Bridge,
		OnLogin: func(ctx context.Context, machineID int64, caPEM string) {
			a.caRollout.Login(ctx, machineID, caPEM)
			a.Delivery.Nudge(machineID)
		},
		OnPing: func(machineID int64) { a.Delivery.Nudge(machineID) },
		// A target's proxy opening or closing: its health is looked at
		// now, not at the check's next turn.
		OnProxy: func(tunnelID int64) {
			if a.targetChecks != nil {
				a.targetChecks.ProxyChanged(tunnelID)
			}
		},
	}
	a.Revtunnel = &revtunnel.Deployer{
		Path:  cfg.SystemPath(revtunnel.ServerConfigPath),
		FRPS:  filepath.Join(cfg.BinDir, "frps"),
		Units: units,
		Params: func(ctx context.Context) (frpconf.ServerParams, error) {
			dashboard, err := a.frpsDashboard(ctx)
			if err != nil {
				return frpconf.ServerParams{}, err
			}
			return frpconf.ServerParams{
				BindPort: cfg.FRPSPort, PluginAddr: cfg.PluginListen, Ports: ports,
				CertFile: revtunnel.RuntimeCertPath, KeyFile: revtunnel.RuntimeKeyPath,
				Dashboard: dashboard,
			}, nil
		},
		CA:       ca,
		CertPath: cfg.SystemPath(revtunnel.ServerCertPath),
		KeyPath:  cfg.SystemPath(revtunnel.ServerKeyPath),
		Host:     a.serverHost,
		Now:      a.Now,
	}
	a.Publish = publish.New(publish.Options{
		Store: a.Store, Run: a.hostTools, Log: a.Log,
		RulesetPath: cfg.SystemPath(PublishRulesetPath),
		Params:      a.publishParams,
	})
}

// PublishRulesetPath keeps the applied publish table (nft -f loads it).
const PublishRulesetPath = "/etc/tunnelsvc/publish.nft"

// publishParams: bind_ip and the ports of public tcp and udp tunnels (not
// paused).
func (a *App) publishParams(ctx context.Context) (publish.Params, error) {
	bind, err := a.settings().BindIP(ctx)
	if err != nil {
		return publish.Params{}, err
	}
	ts, err := a.Store.ListTunnels(ctx, 0)
	if err != nil {
		return publish.Params{}, err
	}
	p := publish.Params{BindIP: bind}
	for _, t := range ts {
		switch {
		case t.Kind == "tcp" && t.Public && !t.Paused:
			p.Ports = append(p.Ports, t.RemotePort)
		case t.Kind == "udp" && t.Public && !t.Paused:
			p.UDPPorts = append(p.UDPPorts, t.RemotePort)
		}
	}
	return p, nil
}

// serverHost is the host machines dial, named in frps's certificate (""
// when nothing names one yet: the certificate then carries only
// tunnelca.ServerName, which is what clients verify).
func (a *App) serverHost(ctx context.Context) (string, error) {
	h, err := a.Reach.TunnelHost(ctx)
	if errors.Is(err, reach.ErrNoAddress) {
		return "", nil
	}
	return h, err
}

// renewCertificates reconciles the tunnel server every
// tunnelca.CheckInterval, which renews frps's certificate (and restarts
// frps) once less than a third of its lifetime is left.
func (a *App) renewCertificates(ctx context.Context) error {
	t := time.NewTicker(tunnelca.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if msg, err := a.Revtunnel.Reconcile(ctx); err != nil {
			a.Log.Error("revtunnel-server: certificate check failed; the deployed certificate stays", "err", err)
		} else {
			a.Log.Info(msg)
		}
		// The wss site's certificate is checked, and renewed, as the
		// Caddyfile is made (its serial is in it).
		if a.follow != nil {
			a.follow.Poke()
		}
	}
}

// pluginServer serves frps's plugin calls on the loopback listener.
func (a *App) pluginServer() *http.Server {
	return &http.Server{Handler: a.Plugin, ReadHeaderTimeout: 10 * time.Second}
}

// targetHealth answers the machines' questions about their targets' health
// from the health checker, which is built after them.
type targetHealth struct{ a *App }

func (t targetHealth) Result(tunnel int64, port int) (health.Result, bool) {
	return t.a.targetChecks.Result(tunnel, port)
}
