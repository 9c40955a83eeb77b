package app

import (
	"context"
	"net"

	"github.com/tunnelsvc/tunnelsvc/daemon/probe"
)

// probeServices builds the tunnel prober: http tunnels are checked through
// Caddy on this box (at bind_ip when set, else loopback) in the background
// and after every tunnel change (a.Loops runs it; changed kicks it).
func (a *App) probeServices() {
	a.Prober = probe.New(probe.Options{
		Store: a.Store, Log: a.Log,
		Domain: a.Setup.Settings.Domain,
		ProxyAddr: func(ctx context.Context) (string, error) {
			bind, err := a.Setup.Settings.BindIP(ctx)
			if err != nil || bind == "" {
				return probe.DefaultProxyAddr, err
			}
			return net.JoinHostPort(bind, "443"), nil
		},
	})
}
