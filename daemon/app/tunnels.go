package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
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
	a.Machines = &machines.Service{
		Store: a.Store, Sealer: a.Sealer, Keys: keys, Log: a.Log, Now: time.Now,
		Limiter: auth.NewLimiter(time.Now), Ports: ports,
		ServerHost: cfg.ServerHost, FRPSPort: cfg.FRPSPort,
	}
	a.Plugin = &revtunnel.Plugin{Store: a.Store, Log: a.Log, Now: time.Now}
	a.Revtunnel = &revtunnel.Deployer{
		Path:  cfg.SystemPath(revtunnel.ServerConfigPath),
		FRPS:  filepath.Join(cfg.BinDir, "frps"),
		Units: units,
		Params: func(ctx context.Context) (frpconf.ServerParams, error) {
			// Tunnel listeners stay on loopback unless bind_ip says otherwise.
			bind, err := localsetup.Settings{Store: a.Store}.BindIP(ctx)
			if err != nil {
				return frpconf.ServerParams{}, fmt.Errorf("read bind_ip: %w", err)
			}
			if bind == "" {
				bind = "127.0.0.1"
			}
			return frpconf.ServerParams{BindPort: cfg.FRPSPort, ProxyBindAddr: bind, PluginAddr: cfg.PluginListen, Ports: ports}, nil
		},
	}
}

// pluginServer serves frps's plugin calls on the loopback listener.
func (a *App) pluginServer() *http.Server {
	return &http.Server{Handler: a.Plugin, ReadHeaderTimeout: 10 * time.Second}
}
