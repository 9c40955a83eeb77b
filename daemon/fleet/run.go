package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/logstream"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/wakeup"
)

// Summary is the last fleet update (GET /api/machines/update), the same on
// every edge: it is read from the database.
type Summary struct {
	Running    bool       `json:"running"`
	MachineIDs []int64    `json:"machine_ids"`
	Updated    []int64    `json:"updated"`
	Failed     *Failure   `json:"failed"`
	Untouched  []int64    `json:"untouched"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// Edge runs it (or ran it last).
	Edge string `json:"edge"`
	// Lines are its last log lines.
	Lines []store.RolloutLine `json:"lines"`
}

// DefaultBatch is how many machines update together after the canary.
const DefaultBatch = 5

// Plan is a fleet update to start: ids in order, the first alone (the
// canary), then the rest batch at a time, to the bundle version target,
// downloaded from base.
type Plan struct {
	IDs    []int64
	Batch  int
	Target string
	Base   string
}

// LeaseName is the cluster's lease on running rollouts.
const LeaseName = "rollouts"

// Rollouts runs fleet updates as jobs in the database. Start stores one;
// Run, on every edge, runs the one that is running while its edge holds
// the lease, and resumes it where it stopped when the edge that ran it
// died (the lease then moves). Every write carries the lease's fence, so
// an edge that lost the lease while stopped cannot write over the edge
// that took it. A machine that was in flight is asked again: its update
// is confirmed if it runs the target already, else sent again.
type Rollouts struct {
	Updater *Updater
	Store   *store.Store
	// Edge is this edge's name.
	Edge string
	// Lease takes or renews the lease called LeaseName for LeaseTTL and
	// returns its fence, 0 when another edge holds it.
	Lease func(ctx context.Context) int64
	// Hub, when set, gets the lines of a rollout this edge runs as its
	// operation "update".
	Hub *logstream.Hub
	Log *slog.Logger

	wake wakeup.Signal
}

// RolloutTick is how often every edge looks for a rollout to run; a new
// one wakes this edge at once. LeaseTTL is how long the lease holds
// without a renewal: a rollout whose edge died resumes on another edge
// within about LeaseTTL+RolloutTick.
const (
	RolloutTick = 5 * time.Second
	LeaseTTL    = 30 * time.Second
)

// Wake makes Run look for a rollout now.
func (r *Rollouts) Wake() { r.wake.Notify() }

// Start stores p as a running rollout (store.ErrRolloutRunning while
// another runs) and wakes this edge's runner.
func (r *Rollouts) Start(ctx context.Context, p Plan) error {
	if p.Batch < 1 {
		p.Batch = DefaultBatch
	}
	_, err := r.Store.CreateRollout(ctx, store.Rollout{Target: p.Target, BaseURL: p.Base, Batch: p.Batch,
		MachineIDs: p.IDs, StartedAt: r.Updater.now().UTC()})
	if err == nil {
		r.Wake()
	}
	return err
}

// Last is the last rollout; empty lists and nulls before the first.
func (r *Rollouts) Last(ctx context.Context) (Summary, error) {
	ro, err := r.Store.LastRollout(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return Summary{MachineIDs: []int64{}, Updated: []int64{}, Untouched: []int64{}, Lines: []store.RolloutLine{}}, nil
	}
	if err != nil {
		return Summary{}, err
	}
	return summary(ro), nil
}

func summary(ro store.Rollout) Summary {
	// The store reads its lists as empty, never null.
	s := Summary{Running: ro.State == store.RolloutRunning, MachineIDs: ro.MachineIDs, Updated: ro.Updated,
		Untouched: []int64{}, StartedAt: &ro.StartedAt, FinishedAt: ro.FinishedAt, Edge: ro.Edge, Lines: ro.Lines}
	if ro.Started < len(ro.MachineIDs) {
		s.Untouched = append(s.Untouched, ro.MachineIDs[ro.Started:]...)
	}
	if f := ro.Failed; f != nil {
		s.Failed = &Failure{MachineID: f.MachineID, Name: f.Name, Reason: f.Reason}
	}
	return s
}

// Run looks for a running rollout every RolloutTick, or when woken, and
// runs it while this edge holds the lease. It returns when ctx ends; a
// rollout it was running is left running, for this edge or another to
// resume.
func (r *Rollouts) Run(ctx context.Context) {
	tick := time.NewTicker(RolloutTick)
	defer tick.Stop()
	for {
		r.runOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-r.wake.C():
		}
	}
}

func (r *Rollouts) log() *slog.Logger {
	if r.Log == nil {
		return slog.Default()
	}
	return r.Log
}

// runOnce runs the running rollout, if there is one and the lease is
// this edge's.
func (r *Rollouts) runOnce(ctx context.Context) {
	ro, err := r.Store.RunningRollout(ctx)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			r.log().Warn("could not read the running fleet update", "err", err)
		}
		return
	}
	fence := r.Lease(ctx)
	if fence == 0 {
		return
	}
	if err := r.Store.ClaimRollout(ctx, ro.ID, r.Edge, fence); err != nil {
		r.log().Warn("could not take up the fleet update", "rollout", ro.ID, "err", err)
		return
	}
	resumed := ro.Edge != "" && ro.Edge != r.Edge
	ro.Edge, ro.Fence = r.Edge, fence
	jobCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The lease is renewed while it runs; when it moves (this edge was
	// stopped past its lease), the rollout stops here.
	go func() {
		t := time.NewTicker(LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-jobCtx.Done():
				return
			case <-t.C:
				if r.Lease(jobCtx) != fence {
					cancel()
					return
				}
			}
		}
	}()
	j := &job{r: r, ro: ro, cancel: cancel}
	if r.Hub != nil {
		if op, err := r.Hub.Begin("update"); err == nil {
			j.op = op
		}
	}
	if resumed {
		j.Line("info", fmt.Sprintf("edge %s takes up this fleet update where it stopped", r.Edge))
	}
	ok := j.run(jobCtx)
	if j.op != nil {
		j.op.Done(ok)
	}
}

// job is one rollout run by this edge: its state as last written, and
// the lines it adds.
type job struct {
	r      *Rollouts
	op     *logstream.Op
	cancel context.CancelFunc
	mu     sync.Mutex
	ro     store.Rollout
}

// Line adds a line to the rollout's log (and this edge's log stream).
func (j *job) Line(level, text string) {
	j.mu.Lock()
	j.ro.Lines = append(j.ro.Lines, store.RolloutLine{At: j.r.Updater.now().UTC(), Level: level, Text: text})
	if len(j.ro.Lines) > store.MaxRolloutLines {
		j.ro.Lines = j.ro.Lines[len(j.ro.Lines)-store.MaxRolloutLines:]
	}
	j.mu.Unlock()
	if j.op != nil {
		j.op.Line(level, text)
	}
	j.save(context.Background())
}

// save writes the rollout as it stands; when another edge took it, this
// run stops.
func (j *job) save(ctx context.Context) {
	j.mu.Lock()
	ro := j.ro
	ro.Lines = slices.Clone(j.ro.Lines)
	ro.Updated = slices.Clone(j.ro.Updated)
	j.mu.Unlock()
	// A short bound: a slow database does not hold the rollout up; the
	// next save writes everything again.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := j.r.Store.SaveRollout(ctx, ro)
	if errors.Is(err, store.ErrFenced) {
		j.r.log().Warn("another edge runs the fleet update now; stopping it here", "rollout", ro.ID)
		j.cancel()
		return
	}
	if err != nil {
		j.r.log().Warn("could not record the fleet update's progress", "rollout", ro.ID, "err", err)
	}
}

// groups splits what is left of the rollout: the canary alone while none
// is updated, then batches.
func (j *job) groups() [][]int64 {
	done := map[int64]bool{}
	for _, id := range j.ro.Updated {
		done[id] = true
	}
	var left []int64
	for _, id := range j.ro.MachineIDs {
		if !done[id] {
			left = append(left, id)
		}
	}
	var out [][]int64
	if len(j.ro.Updated) == 0 && len(left) > 0 {
		out = append(out, left[:1])
		left = left[1:]
	}
	for len(left) > 0 {
		n := min(j.ro.Batch, len(left))
		out = append(out, left[:n])
		left = left[n:]
	}
	return out
}

// run updates what is left, group after group; the first failure stops
// it. It reports whether every machine was updated.
func (j *job) run(ctx context.Context) bool {
	total := len(j.ro.MachineIDs)
	groups := j.groups()
	canary := 0
	if len(j.ro.Updated) == 0 {
		canary = 1
	}
	for i, g := range groups {
		// The group counts as started with the line that says so (Line
		// writes the rollout).
		j.mu.Lock()
		j.ro.Started = max(j.ro.Started, len(j.ro.Updated)+len(g))
		j.mu.Unlock()
		if i < canary {
			j.Line("info", fmt.Sprintf("canary: machine #%d first", g[0]))
		} else {
			j.Line("info", fmt.Sprintf("batch %d of %d: %d machine(s)", i+1-canary, len(groups)-canary, len(g)))
		}
		errs := make([]error, len(g))
		var wg sync.WaitGroup
		for k, id := range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[k] = j.r.Updater.UpdateVia(ctx, j.ro.BaseURL, id, j.ro.Target, j)
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			// Stopped here (shutdown, or the lease moved): left running
			// for whoever holds the lease next.
			return false
		}
		var failure *Failure
		j.mu.Lock()
		for k, err := range errs {
			if err == nil {
				j.ro.Updated = append(j.ro.Updated, g[k])
			} else if failure == nil {
				failure = asFailure(g[k], err)
			}
		}
		j.mu.Unlock()
		if failure != nil {
			j.finish(store.RolloutFailed, failure)
			j.Line("error", fmt.Sprintf("stopped: %s; %d machine(s) left untouched", failure.Error(), total-j.ro.Started))
			return false
		}
	}
	j.finish(store.RolloutDone, nil)
	j.Line("info", fmt.Sprintf("%d machine(s) updated to %s", total, j.ro.Target))
	return true
}

func (j *job) finish(state string, f *Failure) {
	now := j.r.Updater.now().UTC()
	j.mu.Lock()
	j.ro.State, j.ro.FinishedAt = state, &now
	if f != nil {
		j.ro.Failed = &store.RolloutFailure{MachineID: f.MachineID, Name: f.Name, Reason: f.Reason}
	}
	j.mu.Unlock()
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
