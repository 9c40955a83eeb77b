package auth

import (
	"math"
	"net/netip"
	"sync"
	"time"
)

// Login rate limit: this many failures per client address within the window
// locks the address out until the oldest of them leaves the window.
const (
	MaxFailures   = 10
	FailureWindow = 5 * time.Minute
	// maxTracked bounds memory when many addresses fail; the oldest entries
	// are dropped first.
	maxTracked = 65536
)

// Limiter counts failed authentication attempts per client address. Password,
// 2FA and step-up failures share it.
type Limiter struct {
	mu       sync.Mutex
	now      func() time.Time
	failures map[netip.Addr][]time.Time
}

// NewLimiter returns a Limiter using now as its clock (time.Now when nil).
func NewLimiter(now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{now: now, failures: map[netip.Addr][]time.Time{}}
}

// prune drops failures older than the window; the caller holds mu.
func (l *Limiter) prune(addr netip.Addr, now time.Time) []time.Time {
	fs := l.failures[addr]
	i := 0
	for i < len(fs) && now.Sub(fs[i]) >= FailureWindow {
		i++
	}
	fs = fs[i:]
	if len(fs) == 0 {
		delete(l.failures, addr)
		return nil
	}
	l.failures[addr] = fs
	return fs
}

// Check reports whether addr may try now; when not, it returns the wait in
// whole seconds (at least 1).
func (l *Limiter) Check(addr netip.Addr) (ok bool, retryAfter int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	fs := l.prune(addr, now)
	if len(fs) < MaxFailures {
		return true, 0
	}
	wait := fs[len(fs)-MaxFailures].Add(FailureWindow).Sub(now)
	return false, max(1, int(math.Ceil(wait.Seconds())))
}

// Fail records one failed attempt from addr.
func (l *Limiter) Fail(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	fs := l.prune(addr, now)
	if fs == nil && len(l.failures) >= maxTracked {
		l.evictOldest()
	}
	fs = append(fs, now)
	if len(fs) > MaxFailures {
		fs = fs[len(fs)-MaxFailures:]
	}
	l.failures[addr] = fs
}

// Reset forgets addr's failures (after a successful login).
func (l *Limiter) Reset(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.failures, addr)
}

func (l *Limiter) evictOldest() {
	var oldest netip.Addr
	var at time.Time
	for a, fs := range l.failures {
		last := fs[len(fs)-1]
		if at.IsZero() || last.Before(at) {
			oldest, at = a, last
		}
	}
	delete(l.failures, oldest)
}
