package app

import (
	"context"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"net/http"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
)

// gateServices builds the access gate of HTTP tunnels. Every tunnel change
// reaches it at once (gateNow, before the API answers), so a new
// password or access mode ends the old sessions immediately.
func (a *App) gateServices(ctx context.Context) error {
	a.Gate = gate.New(gate.Options{
		Store:   a.Store,
		Domain:  localsetup.Settings{Store: a.Store}.Domain,
		Limiter: a.Auth.Limiter,
		Audit:   a.Audit,
		Log:     a.Log,
		Now:     a.Now,
	})
	return a.Gate.Reload(ctx)
}

// reloadGate reloads the gate every gateReloadEvery: the domain is set at
// install, outside the tunnels' changes.
func (a *App) reloadGate(ctx context.Context) error {
	t := time.NewTicker(gateReloadEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.gateWake.C():
		}
		if err := a.Gate.Reload(ctx); err != nil {
			a.Log.Error("the access gate could not reload the tunnels", "err", err)
		}
	}
}

// gateReloadEvery bounds how long a new domain takes to reach the gate
// (one small query each time).
const gateReloadEvery = 5 * time.Second

// gateServer answers the web proxy's forward_auth checks and the gate's
// pages, on the loopback gate listener.
func (a *App) gateServer() *http.Server {
	mux := http.NewServeMux()
	mux.Handle(gate.ACMEChallengePath, &gate.ACMERelay{Peers: a.peerAddresses, Log: a.Log})
	// Machines on the wss transport, from the web proxy's wss site.
	mux.Handle(frpconf.WebsocketPath, a.Bridge)
	mux.Handle("/", a.Gate.Handler())
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
}
