package agentclient

import (
	"context"
	"strings"
	"sync"
	"time"
)

// Rollout brings machines whose running frpc does not pin the current
// tunnel CA onto it. frps's plugin reports every Login with the CA the
// machine's config carries (Login); a machine that pins another CA, or none
// (configs rendered before the tunnel CA existed), gets its config pushed
// through its agent (agents that predate signed requests included, see
// Client.proveServer), and PushConfig then restarts its frpc, because
// frpc's reload applies proxies only, not the TLS settings.
type Rollout struct {
	// CurrentCA is the tunnel CA certificate (PEM).
	CurrentCA func(ctx context.Context) (string, error)
	// Push queues a config push for a machine.
	Push func(machineID int64)
	// Delay lets the machine's agent tunnel come up after its Login
	// before the push (default 3 s); Every bounds how often one machine is
	// tried (default 10 min), so a machine whose agent cannot take the
	// config is not pushed at every reconnect.
	Delay, Every time.Duration
	Now          func() time.Time

	mu     sync.Mutex
	pinned map[int64]string
	tried  map[int64]time.Time
}

func (r *Rollout) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

func samePEM(a, b string) bool { return strings.TrimSpace(a) == strings.TrimSpace(b) }

// Login records the CA a machine's frpc presented at Login and schedules
// a push when it is not the current one.
func (r *Rollout) Login(ctx context.Context, machineID int64, caPEM string) {
	r.mu.Lock()
	if r.pinned == nil {
		r.pinned, r.tried = map[int64]string{}, map[int64]time.Time{}
	}
	r.pinned[machineID] = caPEM
	r.mu.Unlock()
	if ca, err := r.CurrentCA(ctx); err != nil || samePEM(ca, caPEM) {
		return
	}
	every := r.Every
	if every == 0 {
		every = 10 * time.Minute
	}
	r.mu.Lock()
	last, seen := r.tried[machineID]
	if seen && r.now().Sub(last) < every {
		r.mu.Unlock()
		return
	}
	r.tried[machineID] = r.now()
	r.mu.Unlock()
	delay := r.Delay
	if delay == 0 {
		delay = 3 * time.Second
	}
	time.AfterFunc(delay, func() { r.Push(machineID) })
}

// NeedsRestart says whether the machine's running frpc, as of its latest
// Login, pins another CA than the current one (false when unknown: the
// machine has not logged in since the daemon started).
func (r *Rollout) NeedsRestart(ctx context.Context, machineID int64) bool {
	r.mu.Lock()
	pinned, ok := r.pinned[machineID]
	r.mu.Unlock()
	if !ok {
		return false
	}
	ca, err := r.CurrentCA(ctx)
	return err == nil && !samePEM(ca, pinned)
}
