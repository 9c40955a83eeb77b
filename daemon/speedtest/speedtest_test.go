package speedtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/speedtest"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// fakeAgents is a machine's agent that measures what it is told to: the
// download waits for release; upload fails when failUpload is set.
type fakeAgents struct {
	caps       []string
	release    chan struct{}
	failUpload bool
	host       atomic.Value // the host PathMTU was asked about
}

func (f *fakeAgents) AgentStatus(context.Context, int64) (agentclient.Status, error) {
	return agentclient.Status{Capabilities: f.caps}, nil
}

func (f *fakeAgents) SpeedDownload(ctx context.Context, _ int64, seconds int, limit int64, moved *atomic.Int64) (agent.Transfer, error) {
	if seconds != 3 || limit != agent.MaxSpeedBytes {
		return agent.Transfer{}, fmt.Errorf("asked for %d s and %d bytes", seconds, limit)
	}
	moved.Store(limit / 10)
	select {
	case <-f.release:
	case <-ctx.Done():
		return agent.Transfer{}, ctx.Err()
	}
	return agent.Transfer{Bytes: 20_000_000, Seconds: 3, SteadyBytes: 15_000_000, SteadySeconds: 2.4}, nil // 50 Mbit/s
}

func (f *fakeAgents) SpeedUpload(context.Context, int64, int, int64, *atomic.Int64) (agent.Transfer, error) {
	if f.failUpload {
		return agent.Transfer{}, &agentclient.UnreachableError{MachineID: 1, Err: errors.New("connection reset by peer")}
	}
	return agent.Transfer{Bytes: 9_000_000, Seconds: 3, SteadyBytes: 7_500_000, SteadySeconds: 2.4}, nil // 25 Mbit/s
}

func (f *fakeAgents) RoundTrips(_ context.Context, _ int64, n int) ([]time.Duration, error) {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(35+i) * time.Millisecond
	}
	out[0] = time.Second // one slow exchange (a busy host): the lowest of 36…44 and it is 36 ms
	return out, nil
}

func (f *fakeAgents) PathMTU(_ context.Context, _ int64, host string) (agent.PathMTU, error) {
	f.host.Store(host)
	return agent.PathMTU{Address: "192.0.2.1", MTU: 1400, Payload: 1372}, nil
}

func newService(t *testing.T, a speedtest.Agents) (*speedtest.Service, store.Machine) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := st.RegisterMachine(ctx, store.NewMachine{Name: "nas", Username: "pi", SecretHash: "s", AgentTokenHash: "a",
		Seal: func(int64) (string, error) { return "sealed", nil }, Now: time.Now(), Ports: store.PortRange{Lo: 30000, Hi: 30100}})
	if err != nil {
		t.Fatal(err)
	}
	s := &speedtest.Service{Store: st, Agents: a, Edge: "vps-a",
		Host: func(context.Context, int64) (string, error) { return "vps.example.com", nil }}
	return s, m
}

// finished waits for machine id's newest test to end.
func finished(t *testing.T, s *speedtest.Service, id int64) speedtest.Test {
	t.Helper()
	return waitEnd(t, s, id, 10*time.Second)
}

// A test runs in the background, one at a time per machine, shows its
// phase and progress while it runs, and records what it measured.
func TestServiceRunsOneTestAtATime(t *testing.T) {
	a := &fakeAgents{caps: []string{"update", agentclient.CapSpeedTest}, release: make(chan struct{})}
	s, m := newService(t, a)
	ctx := context.Background()
	if _, err := s.Start(ctx, 999, 3); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unknown machine: %v", err)
	}
	for _, secs := range []int{-1, 11} {
		var in speedtest.InputError
		if _, err := s.Start(ctx, m.ID, secs); !errors.As(err, &in) {
			t.Fatalf("%d seconds: %v, want an InputError", secs, err)
		}
	}
	run, err := s.Start(ctx, m.ID, 3)
	if err != nil || run.State != "running" || run.Phase != "download" || run.Seconds != 3 || run.Edge != "vps-a" || run.FinishedAt != nil {
		t.Fatalf("started: %+v %v", run, err)
	}
	if _, err := s.Start(ctx, m.ID, 3); !errors.Is(err, store.ErrSpeedTestRunning) {
		t.Fatalf("a second test while one runs: %v", err)
	}
	// 10 % of the download's bytes went: 4 % of the whole, at least.
	testutil.Eventually(t, 5*time.Second, "the download's progress shows", func() error {
		ts, err := s.History(ctx, m.ID)
		if err != nil || len(ts) != 1 || ts[0].ID != run.ID || ts[0].Phase != "download" || ts[0].Progress < 4 || ts[0].Progress >= 45 {
			return fmt.Errorf("%+v %v", ts, err)
		}
		return nil
	})
	close(a.release)
	done := finished(t, s, m.ID)
	if done.State != "done" || done.Progress != 100 || done.Phase != "" || done.Error != "" || done.FinishedAt == nil {
		t.Fatalf("done: %+v", done)
	}
	if *done.DownloadMbps != 50 || *done.UploadMbps != 25 || *done.RTTMillis != 36 || *done.MTU != 1400 || *done.Payload != 1372 {
		t.Fatalf("measured %v/%v Mbit/s, %v ms, MTU %v, payload %v", *done.DownloadMbps, *done.UploadMbps, *done.RTTMillis, *done.MTU, *done.Payload)
	}
	if h := a.host.Load(); h != "vps.example.com" {
		t.Fatalf("the path MTU was asked toward %v", h)
	}

	// A test that fails keeps what it measured before.
	a.failUpload = true
	if _, err := s.Start(ctx, m.ID, 3); err != nil {
		t.Fatal(err)
	}
	failed := finished(t, s, m.ID)
	if failed.State != "failed" || failed.DownloadMbps == nil || failed.UploadMbps != nil || failed.RTTMillis != nil ||
		!strings.HasPrefix(failed.Error, "upload: the agent of machine 1 is not reachable") {
		t.Fatalf("failed: %+v", failed)
	}
	if ts, _ := s.History(ctx, m.ID); len(ts) != 2 || ts[0].ID == run.ID || ts[1].ID != run.ID {
		t.Fatalf("history, newest first: %+v", ts)
	}
}

// An agent without the capability is refused before anything runs; a
// test whose runner is gone is marked failed, so the machine can run
// another.
func TestServiceRefusesAndRecovers(t *testing.T) {
	a := &fakeAgents{caps: []string{"update"}, release: make(chan struct{})}
	s, m := newService(t, a)
	ctx := context.Background()
	if _, err := s.Start(ctx, m.ID, 3); !errors.Is(err, speedtest.ErrAgentTooOld) {
		t.Fatalf("an agent that predates speed tests: %v", err)
	}
	if ts, _ := s.History(ctx, m.ID); len(ts) != 0 {
		t.Fatalf("a refused test left %+v", ts)
	}
	// This edge ran a test before it restarted.
	if _, err := s.Store.StartSpeedTest(ctx, store.SpeedTest{MachineID: m.ID, Edge: "vps-a", Phase: "upload", Seconds: 10, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	ts, err := s.History(ctx, m.ID)
	if err != nil || len(ts) != 1 || ts[0].State != "failed" || !strings.Contains(ts[0].Error, "the edge running it stopped") {
		t.Fatalf("a test of a gone runner: %+v %v", ts, err)
	}
	// Another edge's running test is shown running, at its phase's start.
	if _, err := s.Store.StartSpeedTest(ctx, store.SpeedTest{MachineID: m.ID, Edge: "vps-b", Phase: "upload", Seconds: 10, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	a.caps = append(a.caps, agentclient.CapSpeedTest)
	if _, err := s.Start(ctx, m.ID, 3); !errors.Is(err, store.ErrSpeedTestRunning) {
		t.Fatalf("while another edge tests: %v", err)
	}
	if ts, _ := s.History(ctx, m.ID); ts[0].State != "running" || ts[0].Phase != "upload" || ts[0].Progress != 45 || ts[0].Edge != "vps-b" {
		t.Fatalf("another edge's test: %+v", ts[0])
	}
}
