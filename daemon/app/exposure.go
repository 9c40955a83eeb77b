package app

import (
	"context"

	"github.com/tunnelsvc/tunnelsvc/daemon/firewall"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
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
	x, err := a.exposureSnap.Get(a.Store, func() (machines.Exposure, error) { return a.readExposure(ctx) })
	// Not from the database: whether the tunnel server answers.
	x.TunnelServer = a.tunnelServerAlone(ctx)
	return x, err
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

// machineStatus is machines.StatusOf with what this daemon sees of its
// tunnel server, as the API shows it.
func (a *App) machineStatus(m store.Machine) (state, reason string) {
	st := machines.StatusOf(m, a.tunnelServerAlone(context.Background()))
	return st.State, st.Reason
}

// tunnelServerAlone is TunnelServerProblem on a box alone (the only edge
// that is not being retired), else "": on a cluster each edge records its
// own machines offline, and a machine stays online through the others.
func (a *App) tunnelServerAlone(ctx context.Context) string {
	problem := a.TunnelServerProblem()
	if problem == "" {
		return ""
	}
	if id, _ := a.Edge(); id != 0 {
		list, err := a.edgeList.get(ctx, a.Store.ListEdges)
		if err != nil {
			return ""
		}
		others := 0
		for _, e := range list {
			if e.ID != id && e.RetiringAt == nil {
				others++
			}
		}
		if others > 0 {
			return ""
		}
	}
	return problem
}
