package app

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
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
	a.Agents = &agentclient.Client{
		Machines: a.Machines, Host: "127.0.0.1", ServerHost: serverHost, Log: a.Log,
		HTTP: &http.Client{Timeout: PushTimeout},
	}
	var mu sync.Mutex
	pending := map[int64]bool{}
	wake := make(chan struct{}, 1)
	prev := a.Machines.OnChange
	a.Machines.OnChange = func(id int64) {
		if prev != nil {
			prev(id)
		}
		mu.Lock()
		pending[id] = true
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
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
