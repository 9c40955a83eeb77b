package machines

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/health"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

// One http tunnel may be served by several machines: its own (the
// tunnel's machine_id and local_port) first, then others, each through a
// port of its own on the VPS. The web proxy balances the site over them
// ("failover": the first healthy one in order; "round_robin": each in
// turn), passes over a target whose request failed, and, with a health
// check, over one that fails it.

// MaxTargets bounds the machines serving one tunnel, its own included.
const MaxTargets = 16

// DefaultHealthInterval is a health check's interval when none is given.
const DefaultHealthInterval = 10

// TargetInput is one machine serving an http tunnel.
type TargetInput struct {
	MachineID int64 `json:"machine_id"`
	LocalPort int   `json:"local_port"`
}

// HealthInput is an http tunnel's active health check; an empty path
// turns it off.
type HealthInput struct {
	Path         string `json:"path"`
	IntervalS    int    `json:"interval_s"`
	ExpectStatus int    `json:"expect_status"`
}

// TargetView is one machine serving an http tunnel, as the API shows it.
type TargetView struct {
	MachineID   int64  `json:"machine_id"`
	MachineName string `json:"machine_name"`
	LocalPort   int    `json:"local_port"`
	RemotePort  int    `json:"remote_port"`
	// Status is its part on the tunnel server: active (its machine opened
	// it), pending, offline or paused (as the tunnel's own status).
	Status string       `json:"status"`
	Health TargetHealth `json:"health"`
}

// TargetHealth is the last health check of a target.
type TargetHealth struct {
	State     string     `json:"state"` // up, down, unknown
	Message   string     `json:"message"`
	CheckedAt *time.Time `json:"checked_at"`
}

// HealthView is an http tunnel's health check.
type HealthView struct {
	Path         string `json:"path"`
	IntervalS    int    `json:"interval_s"`
	ExpectStatus int    `json:"expect_status"`
}

// HealthResults is what the health checker knows (health.Checker).
type HealthResults interface {
	Result(tunnel int64, port int) (health.Result, bool)
}

// Words of a target's health when there is no result.
const (
	NoHealthCheck  = "no health check is set: the web proxy passes over this machine only after a request to it failed"
	NotCheckedYet  = "not checked yet"
	targetsHTTP    = "targets are only for http tunnels"
	balanceHTTP    = "balance is only for http tunnels"
	healthHTTP     = "health is only for http tunnels"
	balanceChoices = `balance must be "failover" or "round_robin"`
)

// planTargets applies in's targets, balance and health to t (targets[0]
// is t's own machine and port) and returns the other targets to store
// (nil: unchanged). machines are the existing machines.
func planTargets(t *store.Tunnel, in TunnelInput, machines map[int64]store.Machine) (*[]store.TargetSpec, error) {
	if t.Kind != "http" {
		switch {
		case in.Targets != nil:
			return nil, InputError(targetsHTTP)
		case in.Balance != nil:
			return nil, InputError(balanceHTTP)
		case in.Health != nil:
			return nil, InputError(healthHTTP)
		}
		return nil, nil
	}
	if in.Balance != nil {
		if *in.Balance != "failover" && *in.Balance != "round_robin" {
			return nil, InputError(balanceChoices)
		}
		t.Balance = *in.Balance
	}
	if in.Health != nil {
		h := store.Health{Path: in.Health.Path, IntervalS: in.Health.IntervalS, ExpectStatus: in.Health.ExpectStatus}
		if h.Path == "" {
			h = store.Health{}
		} else if h.IntervalS == 0 {
			h.IntervalS = DefaultHealthInterval
		}
		if err := webproxy.CheckHealth(webproxy.Health(h)); err != nil {
			return nil, InputError(err.Error())
		}
		t.Health = h
	}
	if in.Targets == nil {
		return nil, nil
	}
	ts := *in.Targets
	if len(ts) == 0 {
		return nil, InputError("targets must name at least the tunnel's own machine")
	}
	if len(ts) > MaxTargets {
		return nil, InputError(fmt.Sprintf("targets may name at most %d machines", MaxTargets))
	}
	if ts[0].MachineID != t.MachineID {
		return nil, InputError(fmt.Sprintf("targets[0] must be the tunnel's own machine (%d)", t.MachineID))
	}
	if in.LocalPort != nil && *in.LocalPort != ts[0].LocalPort {
		return nil, InputError("local_port and targets[0].local_port differ")
	}
	out := []store.TargetSpec{}
	for i, tg := range ts {
		if tg.LocalPort < 1 || tg.LocalPort > 65535 {
			return nil, InputError(fmt.Sprintf("targets[%d].local_port must be between 1 and 65535", i))
		}
		if _, ok := machines[tg.MachineID]; !ok {
			return nil, InputError(fmt.Sprintf("targets[%d]: machine %d does not exist", i, tg.MachineID))
		}
		for j := 0; j < i; j++ {
			if ts[j] == tg {
				return nil, InputError(fmt.Sprintf("targets[%d] repeats targets[%d]", i, j))
			}
		}
		if i > 0 {
			out = append(out, store.TargetSpec{MachineID: tg.MachineID, LocalPort: tg.LocalPort})
		}
	}
	t.LocalPort = ts[0].LocalPort
	return &out, nil
}

// machineMap is every machine by id.
func (s *Service) machineMap(ctx context.Context) (map[int64]store.Machine, error) {
	ms, err := s.Store.ListMachines(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]store.Machine, len(ms))
	for _, m := range ms {
		out[m.ID] = m
	}
	return out, nil
}

// targetMachines are the machines serving tunnel id besides its own.
func (s *Service) targetMachines(ctx context.Context, id int64) []int64 {
	ts, err := s.Store.TargetsOf(ctx, id)
	if err != nil {
		return nil
	}
	var out []int64
	for _, t := range ts {
		out = append(out, t.MachineID)
	}
	return out
}

// targetsError turns the store's refusals of targets into answers.
func targetsError(err error) error {
	var mm *store.MissingMachineError
	if errors.As(err, &mm) {
		return InputError(fmt.Sprintf("targets: machine %d does not exist", mm.ID))
	}
	return conflict(err)
}

// targetViews is t's targets as the API shows them: its own machine
// first.
func (c tunnelContext) targetViews(t store.Tunnel, own Tunnel) []TargetView {
	hv := func(port int) TargetHealth {
		if t.Health.Path == "" {
			return TargetHealth{State: "unknown", Message: NoHealthCheck}
		}
		r, ok := c.health.Result(t.ID, port)
		if !ok {
			return TargetHealth{State: "unknown", Message: NotCheckedYet}
		}
		at := r.CheckedAt
		return TargetHealth{State: r.State, Message: r.Message, CheckedAt: &at}
	}
	out := []TargetView{{MachineID: t.MachineID, MachineName: c.machines[t.MachineID].Name, LocalPort: t.LocalPort,
		RemotePort: t.RemotePort, Status: own.Status, Health: hv(t.RemotePort)}}
	for _, tg := range c.targets[t.ID] {
		st := "pending"
		switch {
		case t.Paused:
			st = "paused"
		case tg.Status == "online":
			st = "active"
		case tg.Status == "offline":
			st = "offline"
		}
		out = append(out, TargetView{MachineID: tg.MachineID, MachineName: c.machines[tg.MachineID].Name, LocalPort: tg.LocalPort,
			RemotePort: tg.RemotePort, Status: st, Health: hv(tg.RemotePort)})
	}
	return out
}

// noHealth answers for a Service without a checker.
type noHealth struct{}

func (noHealth) Result(int64, int) (health.Result, bool) { return health.Result{}, false }
