package app

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/delivery"
	"github.com/tunnelsvc/tunnelsvc/daemon/fleet"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// PushTimeout bounds one exchange with a machine's agent.
const PushTimeout = 20 * time.Second

// agentServices builds the agent client and the delivery reconciler, which
// brings every machine's client config to its desired generation and keeps
// it there (see package delivery). frps's plugin tells it of every Login
// and Ping, so a machine that is behind is delivered to as soon as it is
// heard from.
func (a *App) agentServices() {
	// Machines whose frpc does not pin the tunnel CA get their config (and
	// a restart of frpc) at their next Login.
	a.caRollout = &agentclient.Rollout{
		CurrentCA: func(ctx context.Context) (string, error) {
			ca, err := a.Machines.TunnelCA(ctx)
			if err != nil {
				return "", err
			}
			return string(ca.CertPEM), nil
		},
		Push: func(id int64) { a.Delivery.Redeliver(id) },
	}
	a.Agents = &agentclient.Client{
		Machines: a.Machines, Host: "127.0.0.1", Log: a.Log,
		HTTP: &http.Client{Timeout: PushTimeout}, ServerUID: a.tunnelServerUID,
		// Every status an agent answers records the versions it reports.
		// The config a machine gets follows its tunnel client's version
		// (frp's wire protocol), so a new one raises its desired state.
		Report: func(ctx context.Context, id int64, st agentclient.Status) {
			before, err := a.Store.GetMachine(ctx, id)
			a.Fleet.Record(ctx, id, st)
			if err == nil && before.Report.ClientVersion != st.ClientVersion {
				if err := a.Delivery.Desire(ctx, id); err != nil {
					a.Log.Warn("the machine's config could not follow its tunnel client's version", "machine_id", id, "err", err)
				}
			}
		},
	}
	a.Fleet = &fleet.Updater{Store: a.Store, Agents: a.Agents, StaticDir: a.Config.StaticDir, Audit: a.Audit, Log: a.Log}
	// Fleet updates are jobs in the database: the edge that holds the
	// lease runs the one that is running, and another resumes it.
	a.Rollouts = &fleet.Rollouts{Updater: a.Fleet, Store: a.Store, Edge: a.Config.EdgeName,
		Lease: a.leaseFence(fleet.LeaseName, fleet.LeaseTTL), Hub: a.Hub, Log: a.Log}
	a.Delivery = delivery.New(delivery.Options{
		Store: a.Store, Configs: a.Machines, Agents: a.Agents, Log: a.Log,
		NeedsRestart: a.caRollout.NeedsRestart,
		Serves:       a.servedMachines,
	})
}

// tunnelServerUID is the uid revtunnel-server (frps) runs as: its dynamic
// user's, as systemd reports it, else its main process's (this daemon's
// ProtectProc=invisible hides other users' processes, so that works only
// outside the packaged unit). Without systemd the daemon does not know which
// frps serves the machines, and agents that predate signed requests are not
// reached.
func (a *App) tunnelServerUID(ctx context.Context) (uint32, error) {
	if a.Units == nil {
		return 0, units.ErrUnavailable
	}
	st, err := a.Units.State(ctx, revtunnel.ServerUnit)
	if err != nil {
		return 0, err
	}
	if st.UID != nil {
		return *st.UID, nil
	}
	if st.MainPID == 0 {
		return 0, fmt.Errorf("%s is not running (%s)", revtunnel.ServerUnit, st.ActiveState)
	}
	return agentclient.ProcessUID(int(st.MainPID))
}
