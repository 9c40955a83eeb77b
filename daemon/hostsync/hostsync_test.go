package hostsync

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeHost is one part's host: what the database wants, what is applied,
// and the tool refusing the next applies when told to.
type fakeHost struct {
	mu       sync.Mutex
	want     string
	applied  string
	refuse   int // applies left to refuse
	applies  int
	saved    []State
	inUse    bool
	toolSays string
}

func (f *fakeHost) part() Part {
	return Part{
		Name: "caddy", Label: "Caddy config",
		Desired: func(context.Context) ([]byte, bool, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return []byte(f.want), f.inUse, nil
		},
		Apply: func(context.Context) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.applies++
			if f.refuse > 0 {
				f.refuse--
				return errors.New(f.toolSays)
			}
			f.applied = f.want
			return nil
		},
	}
}

func (f *fakeHost) SaveHostPart(_ context.Context, edge string, s State) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if edge != "edge-a" {
		return errors.New("wrong edge " + edge)
	}
	f.saved = append(f.saved, s)
	return nil
}

func (f *fakeHost) set(want string) {
	f.mu.Lock()
	f.want = want
	f.mu.Unlock()
}

func (f *fakeHost) get() (applied string, applies int, saved []State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied, f.applies, append([]State(nil), f.saved...)
}

func newSyncer(f *fakeHost, now *time.Time) *Syncer {
	return &Syncer{Edge: "edge-a", Parts: []Part{f.part()}, Record: f, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return *now }}
}

// TestSyncerAppliesUntilEqual: a refused apply keeps the previous
// configuration and is recorded as pending since when, in the tool's
// words; the part is retried with backoff and, once applied, recorded
// well again with one more generation. A part in place is not applied
// again until Reassert, when it is (someone may have changed it).
func TestSyncerAppliesUntilEqual(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 3, 0, 0, time.UTC)
	f := &fakeHost{want: "v1", inUse: true}
	s := newSyncer(f, &now)
	ctx := context.Background()

	s.Pass(ctx)
	if applied, _, saved := f.get(); applied != "v1" || len(saved) != 1 || saved[0].Generation != 1 || saved[0].Drifted() {
		t.Fatalf("first pass: applied %q, saved %+v", applied, saved)
	}
	// Nothing changed: nothing applied, nothing written.
	s.Pass(ctx)
	if _, applies, saved := f.get(); applies != 1 || len(saved) != 1 {
		t.Fatalf("an idle pass applied %d times, saved %d states", applies, len(saved))
	}

	f.mu.Lock()
	f.refuse, f.toolSays = 2, `Error: adapting config using caddyfile: unrecognized directive: bogus`
	f.mu.Unlock()
	f.set("v2")
	s.Pass(ctx)
	st := s.States()[0]
	if applied, _, _ := f.get(); applied != "v1" || !st.Drifted() || st.Error != f.toolSays || st.PendingSince == nil || !st.PendingSince.Equal(now) {
		t.Fatalf("a refused apply: applied %q, state %+v", applied, st)
	}
	if at, ok := s.nextRetry(); !ok || at != now.Add(MinRetry) {
		t.Fatalf("retry at %v %v, want after %v", at, ok, MinRetry)
	}
	// Poked again and again before then (its own failure may be what
	// made the notice): not applied again until its backoff is over.
	_, refused, _ := f.get()
	for range 5 {
		s.Pass(ctx)
	}
	if _, n, _ := f.get(); n != refused {
		t.Fatalf("a failed part was applied %d more times within its backoff", n-refused)
	}
	now = now.Add(time.Second)
	s.Pass(ctx) // refused again: pending since the first refusal, retry later
	if st := s.States()[0]; !st.PendingSince.Equal(now.Add(-time.Second)) {
		t.Fatalf("pending since %v", st.PendingSince)
	}
	if at, _ := s.nextRetry(); at != now.Add(2*MinRetry) {
		t.Fatalf("second retry at %v", at)
	}
	now = now.Add(2 * time.Second)
	s.Pass(ctx)
	applied, applies, saved := f.get()
	last := saved[len(saved)-1]
	if applied != "v2" || last.Drifted() || last.Error != "" || last.PendingSince != nil || last.Generation != 2 {
		t.Fatalf("after the tool accepted: applied %q, state %+v", applied, last)
	}
	if _, ok := s.nextRetry(); ok {
		t.Fatal("a retry is still due")
	}

	// Re-asserted after Reassert even with nothing changed.
	now = now.Add(Reassert)
	s.Pass(ctx)
	if _, n, _ := f.get(); n != applies+1 {
		t.Fatalf("not re-asserted after %v: %d applies, want %d", Reassert, n, applies+1)
	}
	if b := retryAfter(10); b != FullPass {
		t.Fatalf("retryAfter(10) = %v, want the cap %v", b, FullPass)
	}
}

// TestSyncerWithoutNotices: a change nobody pokes the syncer about is
// applied within one period; a poke makes it sooner than the period.
func TestSyncerWithoutNotices(t *testing.T) {
	run := func(f *fakeHost, every time.Duration) *Syncer {
		s := &Syncer{Edge: "edge-a", Parts: []Part{f.part()}, Record: f, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Every: every}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		return s
	}
	waitApplied := func(f *fakeHost, want string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if applied, _, _ := f.get(); applied == want {
				return
			}
		}
		t.Fatalf("%q not applied within 5 s", want)
	}
	lost := &fakeHost{want: "v1", inUse: true}
	run(lost, 200*time.Millisecond)
	waitApplied(lost, "v1")
	lost.set("v2") // no poke: a lost notice
	waitApplied(lost, "v2")

	poked := &fakeHost{want: "v1", inUse: true}
	s := run(poked, time.Hour)
	waitApplied(poked, "v1")
	poked.set("v2")
	s.Poke()
	waitApplied(poked, "v2")
}

// TestSyncerBoundsAHungPart: a part whose apply never returns (a tool or
// the bus that does not answer) fails after PartTimeout and is recorded
// as pending with that reason; the parts after it are still looked at,
// and the next pass goes on.
func TestSyncerBoundsAHungPart(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 3, 0, 0, time.UTC)
	hung := &fakeHost{want: "v1", inUse: true}
	next := &fakeHost{want: "n1", inUse: true}
	stuck := hung.part()
	stuck.Apply = func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	other := next.part()
	other.Name, other.Label = "firewall", "firewall ruleset"
	s := &Syncer{Edge: "edge-a", Parts: []Part{stuck, other}, Record: hung, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return now }, PartTimeout: 50 * time.Millisecond}
	done := make(chan struct{})
	go func() { s.Pass(context.Background()); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a pass over a hung part did not end")
	}
	if applied, _, _ := next.get(); applied != "n1" {
		t.Fatalf("the part after the hung one was not applied: %q", applied)
	}
	_, _, saved := hung.get()
	var caddy *State
	for i := range saved {
		if saved[i].Part == "caddy" {
			caddy = &saved[i]
		}
	}
	if caddy == nil || !caddy.Drifted() || caddy.PendingSince == nil || !strings.Contains(caddy.Error, "no answer within 50ms") {
		t.Fatalf("the hung part as recorded: %+v", caddy)
	}
}

// TestSyncerReadsTheHostBack: a part that can be observed is compared with
// what the host holds, not with what the syncer last meant to write. A
// file changed behind the daemon's back is mended at the next pass (not
// after Reassert), and an apply that leaves something other than desired
// (it read older data, or something wrote over it) is recorded as drift,
// with no error, and looked at again shortly until the host holds what is
// desired.
func TestSyncerReadsTheHostBack(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 3, 0, 0, time.UTC)
	f := &fakeHost{want: "v1", inUse: true}
	p := f.part()
	stale := "" // what the next apply writes instead of f.want
	apply := p.Apply
	p.Apply = func(ctx context.Context) error {
		if err := apply(ctx); err != nil || stale == "" {
			return err
		}
		f.mu.Lock()
		f.applied, stale = stale, ""
		f.mu.Unlock()
		return nil
	}
	p.Observe = func(context.Context) ([]byte, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return []byte(f.applied), nil
	}
	s := &Syncer{Edge: "edge-a", Parts: []Part{p}, Record: f, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return now }}
	ctx := context.Background()

	s.Pass(ctx)
	f.mu.Lock()
	f.applied = "changed by hand"
	f.mu.Unlock()
	s.Pass(ctx)
	if applied, applies, _ := f.get(); applied != "v1" || applies != 2 {
		t.Fatalf("a file changed behind the daemon's back: %q after %d applies, want v1 after 2", applied, applies)
	}

	f.set("v2")
	stale = "v1 again"
	s.Pass(ctx)
	st := s.States()[0]
	if !st.Drifted() || st.Error != "" || st.AppliedHash != hashOf([]byte("v1 again")) || st.DesiredHash != hashOf([]byte("v2")) {
		t.Fatalf("an apply that left the wrong file is recorded as %+v", st)
	}
	if at, ok := s.nextRetry(); !ok || at != now.Add(MinRetry) {
		t.Fatalf("looked at again at %v %v, want after %v", at, ok, MinRetry)
	}
	now = now.Add(MinRetry)
	s.Pass(ctx)
	if applied, _, saved := f.get(); applied != "v2" || saved[len(saved)-1].Drifted() {
		t.Fatalf("the next look left %q, recorded %+v", applied, saved[len(saved)-1])
	}
	if _, ok := s.nextRetry(); ok {
		t.Fatal("a look is still due once the host holds what is desired")
	}
}
