package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// PushTimeout bounds one config push to a machine's agent.
const PushTimeout = 20 * time.Second

// agentServices builds the agent client and chains a config push onto the
// machines' change hook (after setupServices installed its own): whenever a
// machine's tunnels change, its agent gets the new client config, so a new
// tunnel works without anyone touching the machine. Pushes run in the
// background, one at a time, each bounded; failures are logged.
func (a *App) agentServices() {
	cfg := a.Config
	serverHost := cfg.ServerHost
	if serverHost == "" {
		if u, err := url.Parse(cfg.BaseURL); err == nil {
			serverHost = u.Hostname()
		}
	}
	var mu sync.Mutex
	pending := map[int64]bool{}
	wake := make(chan struct{}, 1)
	push := func(id int64) {
		mu.Lock()
		pending[id] = true
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	// Machines whose frpc does not pin the tunnel CA get their config (and
	// a restart of frpc) at their next Login.
	rollout := &agentclient.Rollout{Push: push, CurrentCA: func(ctx context.Context) (string, error) {
		ca, err := a.Machines.TunnelCA(ctx)
		if err != nil {
			return "", err
		}
		return string(ca.CertPEM), nil
	}}
	a.Plugin.OnLogin = rollout.Login
	a.Agents = &agentclient.Client{
		Machines: a.Machines, Host: "127.0.0.1", ServerHost: serverHost, Log: a.Log,
		HTTP: &http.Client{Timeout: PushTimeout}, Rollout: rollout, ServerUID: a.tunnelServerUID,
	}
	prev := a.Machines.OnChange
	a.Machines.OnChange = func(id int64) {
		if prev != nil {
			prev(id)
		}
		push(id)
	}
	go func() {
		for range wake {
			mu.Lock()
			ids := pending
			pending = map[int64]bool{}
			mu.Unlock()
			for id := range ids {
				ctx, cancel := context.WithTimeout(context.Background(), PushTimeout)
				err := a.Agents.PushConfig(ctx, id)
				cancel()
				if !errors.Is(err, store.ErrNotFound) {
					// Shown on the machine until a push works.
					if rerr := a.Machines.RecordConfigPush(context.Background(), id, err); rerr != nil && !errors.Is(rerr, store.ErrNotFound) {
						a.Log.Warn("recording the config push failed", "machine_id", id, "err", rerr)
					}
				}
				switch {
				case errors.Is(err, store.ErrNotFound):
					// The machine was deleted: nothing to push.
				case err != nil:
					a.Log.Warn("pushing the client config to the machine's agent failed; the machine keeps its previous config", "machine_id", id, "err", err)
				default:
					a.Log.Info("client config pushed to the machine's agent", "machine_id", id)
				}
			}
		}
	}()
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
