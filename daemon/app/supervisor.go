package app

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/backoff"
)

// Supervisor runs the daemon's background work: each loop is a
// Run(ctx) error that returns only when ctx ends. A loop that returns
// earlier (with an error, without one, or by panicking) is logged and
// started again after a backoff (1 s, doubling to 1 min, reset after a
// minute of good running). Stop ends them all and waits, so nothing runs
// after the store is closed.
type Supervisor struct {
	Log *slog.Logger

	mu      sync.Mutex
	loops   []namedLoop
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started bool
}

type namedLoop struct {
	name string
	run  func(ctx context.Context) error
	once bool
}

// Loop adds a loop; it starts with Start (or at once when Start was called).
func (s *Supervisor) Loop(name string, run func(ctx context.Context) error) {
	s.add(namedLoop{name: name, run: run})
}

// Once adds a task that runs once (a failure is logged, not retried).
func (s *Supervisor) Once(name string, run func(ctx context.Context) error) {
	s.add(namedLoop{name: name, run: run, once: true})
}

func (s *Supervisor) add(l namedLoop) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loops = append(s.loops, l)
}

// Start runs every loop until ctx ends or Stop is called.
func (s *Supervisor) Start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.started = true
	ctx, s.cancel = context.WithCancel(ctx)
	for _, l := range s.loops {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.supervise(ctx, l)
		}()
	}
}

// Stop ends every loop and waits for them.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

// restartBackoff is the wait before the n-th restart in a row (n ≥ 1).
func restartBackoff(n int) time.Duration { return backoff.Doubling(n, time.Second, time.Minute) }

func (s *Supervisor) supervise(ctx context.Context, l namedLoop) {
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	failures := 0
	for {
		started := time.Now()
		err := runSafely(ctx, l.run)
		if ctx.Err() != nil {
			return
		}
		if l.once {
			if err != nil {
				log.Warn(l.name+" failed", "err", err)
			}
			return
		}
		if time.Since(started) > time.Minute {
			failures = 0
		}
		failures++
		wait := restartBackoff(failures)
		if err == nil {
			err = fmt.Errorf("returned before the daemon stopped")
		}
		log.Error("background loop stopped; restarting it", "loop", l.name, "err", err, "in", wait.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// runSafely runs f, turning a panic into an error with its stack.
func runSafely(ctx context.Context, f func(context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return f(ctx)
}
