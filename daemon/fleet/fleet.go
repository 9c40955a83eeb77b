// Package fleet updates machines to the server's machine bundle (issue 26,
// contract §4): through each machine's agent, one machine at a time or a
// fleet in stages, and records what every agent reports about the software
// it runs.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/bundle"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Machine update states (the API's update.state; outdated is derived).
const (
	StateUpdating    = "updating"
	StateCurrent     = "current"
	StateFailed      = "failed"
	StateRolledBack  = "rolled_back"
	StateUnsupported = "unsupported"
	StateOutdated    = "outdated"
)

// Audit kinds of updates. MACHINE_UPDATE_STARTED is the request's (it has
// the operator's address); the outcomes are recorded here, when known.
const (
	AuditStarted    = "MACHINE_UPDATE_STARTED"
	AuditUpdated    = "MACHINE_UPDATED"
	AuditFailed     = "MACHINE_UPDATE_FAILED"
	AuditRolledBack = "MACHINE_ROLLED_BACK"
)

// Agents is what an update needs of the machines' agents (package
// agentclient implements it).
type Agents interface {
	AgentStatus(ctx context.Context, id int64) (agentclient.Status, error)
	Update(ctx context.Context, id int64, m agentclient.Manifest) (string, error)
	ConfirmUpdate(ctx context.Context, id int64, version string) (string, error)
}

// Progress receives an update's lines (a logstream.Op).
type Progress interface {
	Line(level, text string)
}

// Updater updates machines. Zero durations take the contract's values.
type Updater struct {
	Store  *store.Store
	Agents Agents
	// StaticDir holds the bundle's inputs (--static-dir).
	StaticDir string
	// BaseURL is the join base URL machines download from.
	BaseURL func(ctx context.Context) (string, error)
	Audit   *audit.Recorder
	Log     *slog.Logger
	Now     func() time.Time
	// Poll is how often the machine is asked while it restarts (1 s);
	// ComeBack how long it has to report the new version (100 s).
	Poll, ComeBack time.Duration
}

func (u *Updater) now() time.Time {
	if u.Now == nil {
		return time.Now()
	}
	return u.Now()
}

func (u *Updater) log() *slog.Logger {
	if u.Log == nil {
		return slog.Default()
	}
	return u.Log
}

func (u *Updater) poll() time.Duration {
	if u.Poll <= 0 {
		return time.Second
	}
	return u.Poll
}

func (u *Updater) comeBack() time.Duration {
	if u.ComeBack <= 0 {
		return 100 * time.Second
	}
	return u.ComeBack
}

// ServerVersion is the server's bundle version.
func (u *Updater) ServerVersion() (string, error) { return bundle.Version(u.StaticDir) }

// Record stores what an agent reported about the software it runs. An
// agent that reports no bundle version runs the bundle of its own version
// (machines bootstrapped before bundles).
func (u *Updater) Record(ctx context.Context, id int64, st agentclient.Status) {
	bv := st.BundleVersion
	if bv == "" {
		bv = st.AgentVersion
	}
	r := store.AgentReport{AgentVersion: st.AgentVersion, ClientVersion: st.ClientVersion, BundleVersion: bv,
		Arch: st.Arch, Capabilities: st.Capabilities, At: u.now().UTC()}
	if err := u.Store.SetAgentReport(context.WithoutCancel(ctx), id, r); err != nil && !errors.Is(err, store.ErrNotFound) {
		u.log().Warn("recording the versions a machine's agent reported failed", "machine_id", id, "err", err)
	}
}

// UnsupportedError: the machine's agent cannot take an update.
type UnsupportedError struct{ Name string }

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("the agent of machine %q cannot take an update (it predates fleet updates): run the join again on the machine", e.Name)
}

// Failure is why one machine's update failed, in words.
type Failure struct {
	MachineID int64  `json:"machine_id"`
	Name      string `json:"name"`
	Reason    string `json:"error"`
}

func (f *Failure) Error() string { return fmt.Sprintf("machine %q: %s", f.Name, f.Reason) }

// Update brings one machine to the server's bundle version, which must be
// target (the caller checked the downgrade rule against it). It returns
// once the machine runs it, or with a *Failure.
func (u *Updater) Update(ctx context.Context, id int64, target string, p Progress) error {
	return u.UpdateVia(ctx, "", id, target, p)
}

// UpdateVia is Update with the base URL the machine downloads from (the
// join base of the request that started it); "" asks BaseURL.
func (u *Updater) UpdateVia(ctx context.Context, base string, id int64, target string, p Progress) error {
	m, err := u.Store.GetMachine(ctx, id)
	if err != nil {
		return err
	}
	from := m.Report.BundleVersion
	fail := func(state, why string) error {
		u.setState(ctx, id, store.UpdateState{State: state, Target: target, Error: why, At: u.now().UTC()})
		p.Line("error", fmt.Sprintf("%s: %s", m.Name, why))
		kind := AuditFailed
		if state == StateRolledBack {
			kind = AuditRolledBack
		}
		if state != StateUnsupported {
			u.audit(ctx, kind, fmt.Sprintf("machine %q: bundle %s → %s %s: %s", m.Name, words(from), target, outcomeWords(state), why))
		}
		return &Failure{MachineID: id, Name: m.Name, Reason: why}
	}

	p.Line("info", fmt.Sprintf("%s: asking its agent what it runs", m.Name))
	st, err := u.Agents.AgentStatus(ctx, id)
	if err != nil {
		return fail(StateFailed, agentclient.Words(err))
	}
	u.Record(ctx, id, st)
	from = st.BundleVersion
	if from == "" {
		from = st.AgentVersion
	}
	if !st.Can(agentclient.CapUpdate) {
		why := (&UnsupportedError{Name: m.Name}).Error()
		fail(StateUnsupported, why)
		return &UnsupportedError{Name: m.Name}
	}
	if st.AgentVersion == target {
		// It runs the target already: a rollout resumed after the edge
		// that sent the update died. Its update is confirmed.
		p.Line("info", fmt.Sprintf("%s: runs %s already", m.Name, target))
		return u.confirm(ctx, m.Name, id, from, target, p, fail)
	}
	arch := st.Arch
	if arch == "" {
		arch = "amd64"
	}
	b, err := bundle.Build(u.StaticDir, arch)
	if err != nil {
		return fail(StateFailed, "the server has no bundle for this machine: "+err.Error())
	}
	if b.Version != target {
		return fail(StateFailed, fmt.Sprintf("the server's bundle is %s now, not %s", b.Version, target))
	}
	if base == "" && u.BaseURL != nil {
		if base, err = u.BaseURL(ctx); err != nil {
			return fail(StateFailed, "the server's join address is unknown: "+err.Error())
		}
	}
	if base == "" {
		return fail(StateFailed, "the server's join address is unknown: set --base-url")
	}
	u.setState(ctx, id, store.UpdateState{State: StateUpdating, Target: target, At: u.now().UTC()})
	man := agentclient.Manifest{Version: target, URL: strings.TrimSuffix(base, "/") + "/static/bundles/" + bundle.FileName(arch),
		SHA256: b.SHA256, Size: b.Size}
	p.Line("info", fmt.Sprintf("%s: bundle %s → %s (linux-%s, %d bytes, SHA-256 %s)", m.Name, words(from), target, arch, b.Size, b.SHA256))
	if _, err := u.Agents.Update(ctx, id, man); err != nil {
		return fail(StateFailed, "the agent refused the update: "+agentclient.Words(err))
	}
	p.Line("info", fmt.Sprintf("%s: the agent downloads and checks the bundle, then restarts into it", m.Name))
	return u.comeBackTo(ctx, m.Name, id, from, target, p, fail)
}

// comeBackTo waits for machine id to run target, and confirms it. When
// ctx ends first (the daemon stops, or another edge took the rollout),
// nothing is recorded: the rollout resumes and asks again.
func (u *Updater) comeBackTo(ctx context.Context, name string, id int64, from, target string, p Progress,
	fail func(state, why string) error) error {
	deadline := time.NewTimer(u.comeBack())
	defer deadline.Stop()
	tick := time.NewTicker(u.poll())
	defer tick.Stop()
	lastSeen := ""
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fail(StateFailed, fmt.Sprintf("the machine did not come back within %s", seconds(u.comeBack())))
		case <-tick.C:
		}
		// While the agent restarts it does not answer: expected, asked again.
		st, err := u.Agents.AgentStatus(ctx, id)
		if err != nil {
			continue
		}
		u.Record(ctx, id, st)
		if st.AgentVersion == target {
			return u.confirm(ctx, name, id, from, target, p, fail)
		}
		if up := st.Update; up != nil && up.Version == target {
			switch up.State {
			case StateFailed, StateRolledBack:
				why := up.Error
				if why == "" {
					why = "the machine gave no reason"
				}
				return fail(up.State, why)
			}
			if up.State != lastSeen {
				lastSeen = up.State
				p.Line("info", fmt.Sprintf("%s: %s", name, up.State))
			}
		}
	}
}

// confirm tells the agent of machine id, which runs target, that its
// update is done (which stops its rollback timer), and records it.
func (u *Updater) confirm(ctx context.Context, name string, id int64, from, target string, p Progress,
	fail func(state, why string) error) error {
	if _, err := u.Agents.ConfirmUpdate(ctx, id, target); err != nil {
		return fail(StateFailed, "the new agent runs, but did not take the confirmation (it rolls back by itself): "+agentclient.Words(err))
	}
	u.setState(ctx, id, store.UpdateState{State: StateCurrent, Target: target, At: u.now().UTC()})
	p.Line("info", fmt.Sprintf("%s: runs %s; update confirmed", name, target))
	u.audit(ctx, AuditUpdated, fmt.Sprintf("machine %q: bundle %s → %s", name, words(from), target))
	return nil
}

func (u *Updater) setState(ctx context.Context, id int64, s store.UpdateState) {
	if err := u.Store.SetUpdateState(context.WithoutCancel(ctx), id, s); err != nil {
		u.log().Warn("recording a machine's update state failed", "machine_id", id, "err", err)
	}
}

func (u *Updater) audit(ctx context.Context, kind, detail string) {
	if u.Audit != nil {
		u.Audit.Record(context.WithoutCancel(ctx), audit.Event{Kind: kind, Detail: detail})
	}
}

func outcomeWords(state string) string {
	if state == StateRolledBack {
		return "rolled back"
	}
	return "failed"
}

// words shows an unknown version as such.
func words(v string) string {
	if v == "" {
		return "(unknown)"
	}
	return v
}

func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return d.String()
}
