package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Summary is the last fleet update (GET /api/machines/update).
type Summary struct {
	Running    bool       `json:"running"`
	MachineIDs []int64    `json:"machine_ids"`
	Updated    []int64    `json:"updated"`
	Failed     *Failure   `json:"failed"`
	Untouched  []int64    `json:"untouched"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

func (s Summary) clone() Summary {
	c := s
	c.MachineIDs = append([]int64{}, s.MachineIDs...)
	c.Updated = append([]int64{}, s.Updated...)
	c.Untouched = append([]int64{}, s.Untouched...)
	if s.Failed != nil {
		f := *s.Failed
		c.Failed = &f
	}
	return c
}

// Last is the last fleet update; empty lists and nulls before the first.
func (u *Updater) Last() Summary {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last.clone()
}

// DefaultBatch is how many machines update together after the canary.
const DefaultBatch = 5

// Fleet updates ids to target: the first alone (the canary), then the rest
// batch at a time, in parallel within a batch. The first failure stops it:
// what was not started stays untouched. It returns the first failure.
func (u *Updater) Fleet(ctx context.Context, ids []int64, batch int, target string, p Progress) error {
	return u.FleetVia(ctx, "", ids, batch, target, p)
}

// FleetVia is Fleet with the base URL machines download from ("" asks
// BaseURL).
func (u *Updater) FleetVia(ctx context.Context, base string, ids []int64, batch int, target string, p Progress) error {
	if batch < 1 {
		batch = DefaultBatch
	}
	started := u.now().UTC()
	u.mu.Lock()
	u.last = Summary{Running: true, MachineIDs: append([]int64{}, ids...), Updated: []int64{},
		Untouched: append([]int64{}, ids...), StartedAt: &started}
	u.mu.Unlock()

	var failure *Failure
	groups := [][]int64{}
	if len(ids) > 0 {
		groups = append(groups, ids[:1])
	}
	for rest := ids[min(1, len(ids)):]; len(rest) > 0; rest = rest[min(batch, len(rest)):] {
		groups = append(groups, rest[:min(batch, len(rest))])
	}
	for i, g := range groups {
		if i == 0 {
			p.Line("info", fmt.Sprintf("canary: machine #%d first", g[0]))
		} else {
			p.Line("info", fmt.Sprintf("batch %d of %d: %d machine(s)", i, len(groups)-1, len(g)))
		}
		u.mu.Lock()
		u.last.Untouched = u.last.Untouched[len(g):]
		u.mu.Unlock()
		errs := make([]error, len(g))
		var wg sync.WaitGroup
		for j, id := range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[j] = u.UpdateVia(ctx, base, id, target, p)
			}()
		}
		wg.Wait()
		u.mu.Lock()
		for j, err := range errs {
			if err == nil {
				u.last.Updated = append(u.last.Updated, g[j])
				continue
			}
			if failure == nil {
				failure = asFailure(g[j], err)
			}
		}
		u.last.Failed = failure
		u.mu.Unlock()
		if failure != nil {
			p.Line("error", fmt.Sprintf("stopped: %s; %d machine(s) left untouched", failure.Error(), len(ids)-countDone(groups[:i+1])))
			break
		}
	}
	finished := u.now().UTC()
	u.mu.Lock()
	u.last.Running = false
	u.last.FinishedAt = &finished
	u.mu.Unlock()
	if failure != nil {
		return failure
	}
	p.Line("info", fmt.Sprintf("%d machine(s) updated to %s", len(ids), target))
	return nil
}

func countDone(groups [][]int64) int {
	n := 0
	for _, g := range groups {
		n += len(g)
	}
	return n
}

func asFailure(id int64, err error) *Failure {
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	var un *UnsupportedError
	if errors.As(err, &un) {
		return &Failure{MachineID: id, Name: un.Name, Reason: un.Error()}
	}
	return &Failure{MachineID: id, Name: fmt.Sprintf("#%d", id), Reason: err.Error()}
}

// Refresh is the light background pass: every online machine whose
// reported versions are unknown or older than every is asked for its
// status, one at a time, so the dashboard's "outdated" stays true without
// a storm of requests. It returns when ctx ends.
func (u *Updater) Refresh(ctx context.Context, every time.Duration) {
	// Every few seconds, so that a machine that just joined shows its
	// versions at once; only machines never heard from, or not for
	// `every`, are asked.
	tick := time.NewTicker(RefreshTick)
	defer tick.Stop()
	for {
		u.refreshOnce(ctx, every)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// RefreshTick is how often Refresh looks for machines to ask.
const RefreshTick = 5 * time.Second

func (u *Updater) refreshOnce(ctx context.Context, every time.Duration) {
	ms, err := u.Store.ListMachines(ctx)
	if err != nil {
		return
	}
	for _, m := range ms {
		if ctx.Err() != nil {
			return
		}
		if m.Status != "online" || m.AgentPort == 0 || (!m.Report.At.IsZero() && u.now().Sub(m.Report.At) < every) {
			continue
		}
		// The client records what the agent says (its Report hook); a
		// machine that does not answer is asked again at the next pass.
		if st, err := u.Agents.AgentStatus(ctx, m.ID); err == nil {
			u.Record(ctx, m.ID, st)
		}
	}
}
