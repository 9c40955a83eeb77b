// Package hostsync keeps this edge's own host as the database says it
// should be: each part the daemon renders (the tunnel server's config, the
// Caddyfile, the nft publish table, the firewall ruleset) has a desired
// state, rendered afresh, and an applied one. The syncer applies a part
// until the two are equal, retries a failed apply with backoff, and makes
// a full pass at least every FullPass, so a change heard of late, or not
// at all, costs at most one pass. What it finds is recorded per edge and
// part, for the Edges page and the metrics: a failed apply keeps the
// previous working configuration and says why, in the tool's own words.
package hostsync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/backoff"
	"github.com/tunnelsvc/tunnelsvc/daemon/wakeup"
)

// FullPass bounds the time between two looks at every part.
const FullPass = 30 * time.Second

// Backoff bounds: a failed part is tried again after MinRetry, doubling up
// to FullPass.
const MinRetry = time.Second

// Reassert is how long a part in place goes without being applied again
// (its file rewritten if someone changed it, its table loaded again if it
// was flushed): the observed state is brought back to the desired one
// even when nothing in the database changed.
const Reassert = 5 * time.Minute

// PartTimeout bounds one look at a part (render, apply, record): a call
// that hangs (a tool, the bus, the database) fails the part, which is
// then recorded as pending with that error and retried, instead of
// stopping every later pass with the last state recorded as in place.
const PartTimeout = time.Minute

// Part is one piece of this edge's host.
type Part struct {
	// Name is its key ("frps", "visitorhop", "caddy", "publish", "firewall"); Label says
	// it in words ("Caddy config").
	Name, Label string
	// Desired renders what the part must be now; inUse false when this
	// edge does not run it (the web proxy not installed, no public tcp
	// tunnel, a firewall the operator manages).
	Desired func(ctx context.Context) (content []byte, inUse bool, err error)
	// Apply brings the host to the desired state. It is idempotent (a
	// part already in place is left alone) and, when it fails, leaves the
	// previous working configuration and says why in the tool's words.
	Apply func(ctx context.Context) error
	// Observe, when set, reads what the host holds now (the file on
	// disk): a part whose observed state differs from the desired one is
	// applied at the next look, whoever changed it, and what an apply
	// left is read back, so the applied hash recorded is of what the host
	// holds, not of what the syncer meant to write.
	Observe func(ctx context.Context) ([]byte, error)
}

// State is what the syncer last found of a part on this edge.
type State struct {
	Part  string `json:"part"`
	Label string `json:"label"`
	// InUse is false for a part this edge does not run.
	InUse bool `json:"in_use"`
	// DesiredHash and AppliedHash name the rendered configuration wanted
	// and the one last applied (sha256, 16 hex digits).
	DesiredHash string `json:"desired_hash"`
	AppliedHash string `json:"applied_hash"`
	// Generation counts the configurations applied since this edge
	// started keeping the part (each new one adds one).
	Generation int64 `json:"generation"`
	// PendingSince is when the part first failed to reach its desired
	// state, and Error the last failure, in the tool's words.
	PendingSince *time.Time `json:"pending_since,omitempty"`
	Error        string     `json:"error,omitempty"`
	CheckedAt    time.Time  `json:"checked_at"`
}

// Drifted says whether the part is not (yet) as desired.
func (s State) Drifted() bool { return s.InUse && (s.Error != "" || s.DesiredHash != s.AppliedHash) }

// Recorder keeps the states for the cluster (the database); a failure is
// logged and tried again at the next pass.
type Recorder interface {
	SaveHostPart(ctx context.Context, edge string, s State) error
}

// Syncer reconciles the parts of one edge.
type Syncer struct {
	Edge   string
	Parts  []Part
	Record Recorder
	Log    *slog.Logger
	Now    func() time.Time
	// Every is the full pass's period (FullPass when zero); Reassert how
	// long a part in place goes without being applied again, which
	// mends what changed it behind the daemon's back (Reassert when zero).
	Every, Reassert time.Duration
	// PartTimeout bounds one look at a part (PartTimeout when zero).
	PartTimeout time.Duration

	wake wakeup.Signal

	mu     sync.Mutex
	states map[string]*partState
}

type partState struct {
	State
	failures int
	retryAt  time.Time
	// failedHash is the desired configuration that failed last.
	failedHash string
	// applied is set once this process applied the part; appliedAt is
	// when it last did.
	applied   bool
	appliedAt time.Time
	// saved is false until the database took this state.
	saved bool
	// recheckAt: an apply succeeded but left the host other than desired
	// (what it read had moved on, or something wrote over it): the part
	// is looked at again then.
	recheckAt time.Time
	rechecks  int
}

func (s *Syncer) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

// Poke asks for a pass now (a change was heard of); it never blocks. A
// lost poke costs at most one full pass.
func (s *Syncer) Poke() { s.wake.Notify() }

// States returns what the syncer last found of each part, in Parts order.
func (s *Syncer) States() []State {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]State, 0, len(s.Parts))
	for _, p := range s.Parts {
		if st, ok := s.states[p.Name]; ok {
			out = append(out, st.State)
		}
	}
	return out
}

// Run makes a pass at once, then whenever poked, when a failed part is due
// again, and at least every Every, until ctx ends. Each pass is bounded by
// the period.
func (s *Syncer) Run(ctx context.Context) error {
	every := s.Every
	if every <= 0 {
		every = FullPass
	}
	for {
		pctx, cancel := context.WithTimeout(ctx, every)
		s.Pass(pctx)
		cancel()
		// Until the period ends, a failed part is due again, or a change
		// is heard of: each starts a pass over every part (cheap for the
		// parts in place, and a part's inputs may have moved meanwhile).
		wait := every
		if due, ok := s.nextRetry(); ok {
			wait = min(wait, max(due.Sub(s.now()), 0))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-s.wake.C():
		case <-t.C:
		}
		t.Stop()
	}
}

// nextRetry is when the earliest failed part is due again.
func (s *Syncer) nextRetry() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var at time.Time
	for _, st := range s.states {
		due := st.recheckAt
		if st.failures > 0 {
			due = st.retryAt
		}
		if !due.IsZero() && (at.IsZero() || due.Before(at)) {
			at = due
		}
	}
	return at, !at.IsZero()
}

// Pass looks at every part once and applies what is not as desired.
func (s *Syncer) Pass(ctx context.Context) {
	for _, p := range s.Parts {
		if ctx.Err() != nil {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, s.partTimeout())
		s.sync(pctx, p)
		cancel()
	}
}

// sync renders part p and, when it is due (never applied by this
// process, changed, observed other than desired, failed last time, or not
// re-asserted for Reassert), applies it; then records what it found.
func (s *Syncer) sync(ctx context.Context, p Part) {
	content, inUse, err := p.Desired(ctx)
	hash := ""
	if err == nil && inUse {
		hash = hashOf(content)
	}
	seen, observed := s.observe(ctx, p, err == nil && inUse)
	s.mu.Lock()
	st := s.state(p)
	due := s.due(st, hash, observed && seen != hash)
	s.mu.Unlock()
	if err == nil && due {
		// Not run here (inUse false): Apply removes what is left of it.
		err = p.Apply(ctx)
		if err == nil {
			// What the apply left, read back.
			seen, observed = s.observe(ctx, p, inUse)
		}
	}
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %s (a tool, the system bus or the database did not answer): %w", s.partTimeout(), err)
	}
	s.mu.Lock()
	now := s.now()
	before := st.State
	st.CheckedAt, st.InUse, st.DesiredHash = now, inUse, hash
	switch {
	case err != nil:
		if st.PendingSince == nil {
			st.PendingSince = &now
		}
		st.Error = err.Error()
		st.failures++
		st.retryAt, st.failedHash = now.Add(retryAfter(st.failures)), hash
	case due:
		applied, rechecks := hash, st.rechecks
		st.recheckAt, st.rechecks = time.Time{}, 0
		if observed && seen != hash {
			// Applied, yet the host holds something else: shown as drift
			// (no error: nothing refused) and looked at again shortly,
			// with backoff should it keep happening.
			st.rechecks = rechecks + 1
			applied, st.recheckAt = seen, now.Add(retryAfter(st.rechecks))
			s.Log.Info("this edge's "+p.Label+" was applied but is not as desired yet; looked at again shortly", "part", p.Name)
		}
		if st.AppliedHash != applied && inUse {
			st.Generation++
		}
		st.AppliedHash, st.Error, st.PendingSince, st.failures = applied, "", nil, 0
		st.applied, st.appliedAt = true, now
	}
	if !sameState(before, st.State) {
		st.saved = false
	}
	snapshot, save, failures := st.State, !st.saved, st.failures
	s.mu.Unlock()
	if err != nil {
		s.Log.Warn("this edge's "+p.Label+" is not as desired; the previous configuration stays and it is tried again",
			"part", p.Name, "err", err, "retry_in", retryAfter(failures))
	}
	if save && s.Record != nil {
		s.record(ctx, p, st, snapshot)
	}
}

// due says whether st is to be applied now, hash being what is desired
// and differs whether the host was observed other than that.
func (s *Syncer) due(st *partState, hash string, differs bool) bool {
	if st.failures > 0 {
		// A failed part waits out its backoff, poked or not (its own
		// failure may be what made the notice), unless what is desired
		// changed since it failed.
		return hash != st.failedHash || !s.now().Before(st.retryAt)
	}
	return !st.applied || st.AppliedHash != hash || differs || s.now().Sub(st.appliedAt) >= s.reassert()
}

// observe reads what the host holds of p, when p can say and is in use.
// A failed read counts as not observed: the remembered state stands.
func (s *Syncer) observe(ctx context.Context, p Part, inUse bool) (hash string, ok bool) {
	if p.Observe == nil || !inUse {
		return "", false
	}
	b, err := p.Observe(ctx)
	if err != nil {
		s.Log.Warn("could not read this edge's "+p.Label+" back", "err", err)
		return "", false
	}
	return hashOf(b), true
}

// record saves snapshot, st's state, in the database. It is recorded even
// when the look ran out of time: that is news.
func (s *Syncer) record(ctx context.Context, p Part, st *partState, snapshot State) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	err := s.Record.SaveHostPart(rctx, s.Edge, snapshot)
	cancel()
	if err != nil {
		s.Log.Warn("could not record the state of this edge's "+p.Label+"; recorded at a later pass", "err", err)
		return
	}
	s.mu.Lock()
	if sameState(st.State, snapshot) {
		st.saved = true
	}
	s.mu.Unlock()
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// sameState says whether a and b differ only in when they were checked.
func sameState(a, b State) bool {
	a.CheckedAt, b.CheckedAt = time.Time{}, time.Time{}
	sinceA, sinceB := a.PendingSince, b.PendingSince
	a.PendingSince, b.PendingSince = nil, nil
	return a == b && (sinceA == nil) == (sinceB == nil) && (sinceA == nil || sinceA.Equal(*sinceB))
}

func (s *Syncer) partTimeout() time.Duration {
	if s.PartTimeout <= 0 {
		return PartTimeout
	}
	return s.PartTimeout
}

func (s *Syncer) reassert() time.Duration {
	if s.Reassert <= 0 {
		return Reassert
	}
	return s.Reassert
}

// state is p's entry, made on first use; the caller holds mu.
func (s *Syncer) state(p Part) *partState {
	if s.states == nil {
		s.states = map[string]*partState{}
	}
	st, ok := s.states[p.Name]
	if !ok {
		st = &partState{State: State{Part: p.Name, Label: p.Label}}
		s.states[p.Name] = st
	}
	return st
}

// backoff is the wait after n failures in a row.
func retryAfter(n int) time.Duration { return backoff.Doubling(n, MinRetry, FullPass) }
