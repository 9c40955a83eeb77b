// Package speedtest measures the link between this edge and a machine,
// through the machine's own tunnel (issue 50): the download (edge to
// machine) and upload (machine to edge) rates, each measured where the
// bytes arrive, the round-trip time, and the largest payload that passes
// unfragmented. A test runs when the operator asks, never on a schedule,
// and one at a time per machine.
package speedtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Agents is what a test needs of the machine's agent (agentclient.Client).
type Agents interface {
	AgentStatus(ctx context.Context, id int64) (agentclient.Status, error)
	SpeedDownload(ctx context.Context, id int64, seconds int, limit int64, moved *atomic.Int64) (agent.Transfer, error)
	SpeedUpload(ctx context.Context, id int64, seconds int, limit int64, moved *atomic.Int64) (agent.Transfer, error)
	RoundTrips(ctx context.Context, id int64, n int) ([]time.Duration, error)
	PathMTU(ctx context.Context, id int64, host string) (agent.PathMTU, error)
}

var _ Agents = (*agentclient.Client)(nil)

// Phases of a running test, in order.
const (
	PhaseDownload = "download"
	PhaseUpload   = "upload"
	PhaseRTT      = "rtt"
	PhaseMTU      = "mtu"
)

// RoundTrips is how many round trips the RTT is the lowest of.
const RoundTrips = 10

// MaxHistory bounds the tests a machine's history lists.
const MaxHistory = 500

// abandonAfter: a test running longer than this lost its runner (a test
// takes at most two directions of MaxSpeedSeconds and SpeedGrace, and a
// few round trips).
const abandonAfter = 3 * time.Minute

// ErrAgentTooOld: the machine's agent does not list the speedtest
// capability; a fleet update brings one that does.
var ErrAgentTooOld = errors.New("the machine's agent predates speed tests")

// StoreError is the store failing while a test was checked or recorded:
// the server's failure, not the machine's.
type StoreError struct{ Err error }

func (e StoreError) Error() string {
	return "the speed tests could not be read or recorded: " + e.Err.Error()
}
func (e StoreError) Unwrap() error { return e.Err }

// InputError is a bad request, in words.
type InputError string

func (e InputError) Error() string { return string(e) }

// Service runs speed tests and keeps their history.
type Service struct {
	Store  *store.Store
	Agents Agents
	// Host is the address machine id's tunnel client dials for this
	// edge: its agent reads the path MTU toward it.
	Host func(ctx context.Context, id int64) (string, error)
	// Edge is this edge's name, recorded with each test it runs.
	Edge string
	Log  *slog.Logger
	Now  func() time.Time
	// Life bounds the tests running in the background (the daemon's).
	Life context.Context

	// start makes checking and recording a new test one step on this
	// edge (and abandon never takes one just recorded for lost).
	start sync.Mutex
	mu    sync.Mutex
	live  map[int64]*progress // test id: the tests this edge runs now
	// running counts the tests this edge runs, for Wait.
	running sync.WaitGroup
}

// Wait returns once every test this edge runs has ended and recorded how
// it went (ending Life ends them within a moment).
func (s *Service) Wait() { s.running.Wait() }

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Service) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// Start checks that machine id can take a test and starts one, each
// direction bounded by seconds (0: agent.MaxSpeedSeconds), and returns it
// running. store.ErrNotFound: no such machine; store.ErrSpeedTestRunning:
// one runs; ErrAgentTooOld; else what reaching the agent failed with.
func (s *Service) Start(ctx context.Context, id int64, seconds int) (Test, error) {
	if seconds == 0 {
		seconds = agent.MaxSpeedSeconds
	}
	if seconds < 1 || seconds > agent.MaxSpeedSeconds {
		return Test{}, InputError(fmt.Sprintf("seconds must be 1 to %d", agent.MaxSpeedSeconds))
	}
	if _, err := s.Store.GetMachine(ctx, id); errors.Is(err, store.ErrNotFound) {
		return Test{}, err
	} else if err != nil {
		return Test{}, StoreError{err}
	}
	if err := s.abandon(ctx); err != nil {
		return Test{}, StoreError{err}
	}
	if ts, err := s.Store.ListSpeedTests(ctx, id, 1); err != nil {
		return Test{}, StoreError{err}
	} else if len(ts) > 0 && ts[0].State == store.SpeedTestRunning {
		return Test{}, store.ErrSpeedTestRunning
	}
	st, err := s.Agents.AgentStatus(ctx, id)
	if err != nil {
		return Test{}, err
	}
	if !st.Can(agentclient.CapSpeedTest) {
		return Test{}, ErrAgentTooOld
	}
	t := store.SpeedTest{MachineID: id, Edge: s.Edge, State: store.SpeedTestRunning, Phase: PhaseDownload,
		Seconds: seconds, StartedAt: s.now().UTC().Truncate(time.Millisecond)}
	p := &progress{seconds: seconds}
	p.enter(PhaseDownload, time.Now())
	s.start.Lock()
	t.ID, err = s.Store.StartSpeedTest(ctx, t)
	if err == nil {
		s.mu.Lock()
		if s.live == nil {
			s.live = map[int64]*progress{}
		}
		s.live[t.ID] = p
		s.mu.Unlock()
	}
	s.start.Unlock()
	if err != nil && !errors.Is(err, store.ErrSpeedTestRunning) {
		err = StoreError{err}
	}
	if err != nil {
		return Test{}, err
	}
	s.running.Add(1)
	go s.run(t, p)
	return s.view(t), nil
}

// History lists machine id's tests: the running one first, then the
// newest first. Tests whose runner is gone are marked failed first.
func (s *Service) History(ctx context.Context, id int64) ([]Test, error) {
	if err := s.abandon(ctx); err != nil {
		return nil, err
	}
	ts, err := s.Store.ListSpeedTests(ctx, id, MaxHistory)
	if err != nil {
		return nil, err
	}
	out := make([]Test, len(ts))
	for i, t := range ts {
		out[i] = s.view(t)
	}
	return out, nil
}

// abandon marks failed the running tests no edge runs any more: this
// edge's that it does not run now (it restarted), and any that ran past
// abandonAfter.
func (s *Service) abandon(ctx context.Context) error {
	s.start.Lock()
	defer s.start.Unlock()
	s.mu.Lock()
	running := map[int64]bool{}
	for id := range s.live {
		running[id] = true
	}
	s.mu.Unlock()
	now := s.now()
	_, err := s.Store.AbandonSpeedTests(ctx, now.Add(-abandonAfter), s.Edge, func(id int64) bool { return running[id] },
		"the test did not finish: the edge running it stopped", now)
	return err
}

// run runs test t to its end and records how it went.
func (s *Service) run(t store.SpeedTest, p *progress) {
	defer s.running.Done()
	defer func() {
		s.mu.Lock()
		delete(s.live, t.ID)
		s.mu.Unlock()
	}()
	ctx := s.Life
	if ctx == nil {
		ctx = context.Background()
	}
	err := s.measure(ctx, &t, p)
	end := s.now().UTC().Truncate(time.Millisecond)
	t.FinishedAt, t.State = &end, store.SpeedTestDone
	if err != nil {
		t.State, t.Error = store.SpeedTestFailed, err.Error()
	}
	if ferr := s.Store.FinishSpeedTest(context.WithoutCancel(ctx), t); ferr != nil {
		s.log().Warn("speed test: recording the result failed", "machine_id", t.MachineID, "test", t.ID, "err", ferr)
	}
	v := s.view(t)
	s.log().Info("speed test ended", "machine_id", t.MachineID, "state", t.State, "download_mbps", deref(v.DownloadMbps),
		"upload_mbps", deref(v.UploadMbps), "rtt_ms", deref(v.RTTMillis), "payload", derefInt(v.Payload), "err", t.Error)
}
