package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// A loop that fails or panics is logged and started again; Stop ends every
// loop and returns only once none runs.
func TestSupervisorRestartsAndStops(t *testing.T) {
	var logs testutil.SyncBuffer
	s := &Supervisor{Log: slog.New(slog.NewTextHandler(&logs, nil))}
	var failing, panicking, steady atomic.Int32
	var running atomic.Int32
	s.Loop("failing", func(ctx context.Context) error {
		if failing.Add(1) == 1 {
			return errors.New("database is locked")
		}
		<-ctx.Done()
		return nil
	})
	s.Loop("panicking", func(ctx context.Context) error {
		if panicking.Add(1) == 1 {
			panic("nil map")
		}
		<-ctx.Done()
		return nil
	})
	s.Loop("steady", func(ctx context.Context) error {
		steady.Add(1)
		running.Add(1)
		defer running.Add(-1)
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // still winding down when Stop is called
		return nil
	})
	ran := make(chan struct{})
	s.Once("once", func(context.Context) error { close(ran); return errors.New("caddy validate: bad") })
	s.Start(context.Background())
	testutil.Eventually(t, 10*time.Second, "both broken loops restarted", func() error {
		if failing.Load() < 2 || panicking.Load() < 2 {
			return fmt.Errorf("failing ran %d times, panicking %d", failing.Load(), panicking.Load())
		}
		return nil
	})
	<-ran
	s.Stop()
	if running.Load() != 0 {
		t.Fatal("Stop returned while a loop still ran")
	}
	if steady.Load() != 1 {
		t.Fatalf("a healthy loop was started %d times", steady.Load())
	}
	out := logs.String()
	for _, want := range []string{
		`loop=failing err="database is locked"`, `loop=panicking err="panic: nil map`, `"once failed" err="caddy validate: bad"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}

func TestRestartBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 6: 32 * time.Second, 7: time.Minute, 20: time.Minute} {
		if got := restartBackoff(n); got != want {
			t.Errorf("restart %d: %v, want %v", n, got, want)
		}
	}
}
