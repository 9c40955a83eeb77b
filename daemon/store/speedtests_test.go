package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

func speedMachine(t *testing.T, s *Store, name string) Machine {
	t.Helper()
	m, err := s.RegisterMachine(context.Background(), NewMachine{Name: name, Username: "pi", SecretHash: name + "s", AgentTokenHash: name + "a",
		Seal: func(int64) (string, error) { return "sealed", nil }, Now: time.Now(), Ports: PortRange{Lo: 30000, Hi: 30100}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// One test runs per machine, whichever edge starts it; a finished test
// keeps what it measured (NULL what it did not); the list puts the running
// one first; tests whose runner is gone are marked failed; tests older
// than the cutoff are pruned; a deleted machine takes its tests along.
func TestSpeedTests(t *testing.T) { eachStore(t, testSpeedTests) }

func testSpeedTests(t *testing.T, s *Store) {
	ctx := context.Background()
	nas, pi := speedMachine(t, s, "nas"), speedMachine(t, s, "pi")
	now := time.Unix(1_800_000_000, 0).UTC()
	start := func(m int64, edge string, at time.Time) (int64, error) {
		return s.StartSpeedTest(ctx, SpeedTest{MachineID: m, Edge: edge, Phase: "download", Seconds: 10, StartedAt: at})
	}
	old, err := start(nas.ID, "a", now.Add(-100*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := start(nas.ID, "b", now); !errors.Is(err, ErrSpeedTestRunning) {
		t.Fatalf("a second test of nas: %v, want ErrSpeedTestRunning", err)
	}
	if _, err := start(9999, "a", now); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a test of no machine: %v, want ErrNotFound", err)
	}
	kbps, rtt, mtu := int64(48_500), int64(40_200), 1400
	done := now.Add(-100*24*time.Hour + 30*time.Second)
	if err := s.FinishSpeedTest(ctx, SpeedTest{ID: old, State: SpeedTestFailed, FinishedAt: &done, DownloadKbps: &kbps, Error: "the upload broke off"}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishSpeedTest(ctx, SpeedTest{ID: old, State: SpeedTestDone, FinishedAt: &done}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("finishing a finished test: %v, want ErrNotFound", err)
	}

	recent, err := start(nas.ID, "b", now.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetSpeedTestPhase(ctx, recent, "rtt"); err != nil {
		t.Fatal(err)
	}
	running, _ := start(pi.ID, "a", now.Add(-10*time.Second))
	gone, _ := start(speedMachine(t, s, "cam").ID, "a", now.Add(-10*time.Second))
	// Edge a runs only `running` now; the test of nas started on b a
	// minute ago is b's.
	n, err := s.AbandonSpeedTests(ctx, now.Add(-2*time.Minute), "a", func(id int64) bool { return id == running }, "the edge restarted", now)
	if err != nil || n != 1 {
		t.Fatalf("abandoned %d, %v; want 1 (cam's)", n, err)
	}
	ts, err := s.ListSpeedTests(ctx, nas.ID, 10)
	if err != nil || len(ts) != 2 {
		t.Fatalf("nas's tests: %+v %v", ts, err)
	}
	if r := ts[0]; r.ID != recent || r.State != SpeedTestRunning || r.Phase != "rtt" || r.Edge != "b" || r.FinishedAt != nil {
		t.Fatalf("the running test first: %+v", r)
	}
	if f := ts[1]; f.State != SpeedTestFailed || f.DownloadKbps == nil || *f.DownloadKbps != kbps || f.UploadKbps != nil || f.RTTMicros != nil ||
		f.Error != "the upload broke off" || f.FinishedAt == nil || !f.FinishedAt.Equal(done) || f.Seconds != 10 {
		t.Fatalf("the finished test: %+v", f)
	}
	if err := s.FinishSpeedTest(ctx, SpeedTest{ID: recent, State: SpeedTestDone, FinishedAt: &now, DownloadKbps: &kbps, UploadKbps: &kbps,
		RTTMicros: &rtt, MTU: &mtu, Payload: new(int)}); err != nil {
		t.Fatal(err)
	}
	if ts, _ := s.ListSpeedTests(ctx, nas.ID, 1); len(ts) != 1 || ts[0].ID != recent || *ts[0].MTU != 1400 || *ts[0].RTTMicros != rtt || ts[0].Phase != "" {
		t.Fatalf("the newest of nas: %+v", ts)
	}
	if ts, _ := s.ListSpeedTests(ctx, gone, 1); len(ts) != 0 {
		t.Fatalf("listed by machine id, not test id: %+v", ts)
	}

	if n, err := s.PruneSpeedTests(ctx, now.Add(-SpeedTestRetention)); err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want the one from 100 days ago", n, err)
	}
	if err := s.DeleteMachine(ctx, pi.ID); err != nil {
		t.Fatal(err)
	}
	if c := count(t, s, "speedtests"); c != 2 {
		t.Fatalf("%d tests left, want nas's recent one and cam's", c)
	}
	// pi's test went with it: a new machine may run one again.
	if _, err := start(nas.ID, "a", now); err != nil {
		t.Fatalf("after the last finished: %v", err)
	}
}
