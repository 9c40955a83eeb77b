package app

import (
	"context"

	"github.com/tunnelsvc/tunnelsvc/daemon/firewall"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
)

// exposure is what the dashboard's SSH commands and tunnel addresses follow
// besides the host (the machines service asks a.Reach for that): the
// domain, bind_ip and whether the svc firewall closes private ports.
//
// Every API answer that shows an address asks for it, and it is made only
// of settings and flags: it is worked out once between two writes to the
// database (one check of the store's change count instead of five reads,
// and of decoding the VPS record twice).
func (a *App) exposure(ctx context.Context) (machines.Exposure, error) {
	return a.exposureSnap.Get(a.Store, func() (machines.Exposure, error) { return a.readExposure(ctx) })
}

func (a *App) readExposure(ctx context.Context) (machines.Exposure, error) {
	var x machines.Exposure
	set := a.Setup.Settings
	var err error
	if x.Domain, err = set.Domain(ctx); err != nil {
		return x, err
	}
	if x.BindIP, err = set.BindIP(ctx); err != nil {
		return x, err
	}
	// The firewall package owns its mode.
	if a.Firewall != nil {
		mode, err := a.Firewall.Mode(ctx)
		if err != nil {
			return x, err
		}
		x.FirewallSvc = mode == firewall.ModeSvc
	}
	return x, nil
}
