package auth

import (
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Login rate limits. Per client: this many failures within the window lock
// the client out until the oldest of them leaves the window. Globally: this
// many failed verifications within a minute, from all clients together,
// answer 429 to every client without a session until the oldest of them is
// a minute old.
const (
	MaxFailures    = 10
	FailureWindow  = 5 * time.Minute
	GlobalFailures = 60
	GlobalWindow   = time.Minute
	// maxTracked bounds memory when many clients fail; the oldest entries
	// are dropped first.
	maxTracked = 65536
)

// LimitKey is what a client's failures (and its hashes in flight) are
// counted by: the address itself for IPv4, its /64 for IPv6, because one
// IPv6 host is handed a whole /64 and can pick any address in it.
func LimitKey(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p
	}
	p, _ := a.Prefix(a.BitLen())
	return p
}

// attempt is one counted try; a pointer so a reservation can take back
// exactly its own entry.
type attempt struct{ at time.Time }

// Limiter counts failed authentication attempts per client (LimitKey) and
// in total. Password, setup-code, 2FA and step-up checks share it.
type Limiter struct {
	mu       sync.Mutex
	now      func() time.Time
	failures map[netip.Prefix][]*attempt
	global   []*attempt
	// Log gets one line each time the global budget runs out; nil is silent.
	Log *slog.Logger
	// exhaustedUntil is when the current global lockout ends; a refusal
	// after it starts a new episode and logs again.
	exhaustedUntil time.Time
	// Shared, when set, carries the failures to the other edges of a
	// cluster and theirs here, so that spreading guesses over edges gains
	// nothing. Without it (or while it cannot answer) the counts are this
	// process's own.
	Shared SharedFailures
}

// SharedFailures is where the edges of a cluster keep their failed
// attempts for each other. Its calls must return quickly (they are made
// with the limiter held) and give up rather than wait on a slow database.
type SharedFailures interface {
	// Add records an attempt of key at at and returns its id (0 when it
	// could not be recorded).
	Add(key netip.Prefix, at time.Time) int64
	// Remove takes back an attempt Add recorded (a reservation released).
	Remove(id int64)
	// Others returns the other edges' attempts of key within
	// FailureWindow, and all of theirs within GlobalWindow, before now.
	Others(key netip.Prefix, now time.Time) (forKey, global []time.Time)
}

// NewLimiter returns a Limiter using now as its clock (time.Now when nil).
func NewLimiter(now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{now: now, failures: map[netip.Prefix][]*attempt{}}
}

// prune drops failures older than the window; the caller holds mu.
func (l *Limiter) prune(key netip.Prefix, now time.Time) []*attempt {
	fs := l.failures[key]
	i := 0
	for i < len(fs) && now.Sub(fs[i].at) >= FailureWindow {
		i++
	}
	fs = fs[i:]
	if len(fs) == 0 {
		delete(l.failures, key)
		return nil
	}
	l.failures[key] = fs
	return fs
}

func (l *Limiter) pruneGlobal(now time.Time) {
	i := 0
	for i < len(l.global) && now.Sub(l.global[i].at) >= GlobalWindow {
		i++
	}
	l.global = l.global[i:]
}

func retryAfter(oldest time.Time, window time.Duration, now time.Time) int {
	return max(1, int(math.Ceil(oldest.Add(window).Sub(now).Seconds())))
}

// check returns the refusal for key now, or nil; the caller holds mu.
func (l *Limiter) check(key netip.Prefix, now time.Time, global bool) *RateLimitedError {
	var remoteKey, remoteGlobal []time.Time
	if l.Shared != nil {
		remoteKey, remoteGlobal = l.Shared.Others(key, now)
	}
	fs := merged(l.prune(key, now), remoteKey)
	if len(fs) >= MaxFailures {
		return &RateLimitedError{RetryAfter: retryAfter(fs[len(fs)-MaxFailures], FailureWindow, now)}
	}
	if !global {
		return nil
	}
	l.pruneGlobal(now)
	all := merged(l.global, remoteGlobal)
	if len(all) < GlobalFailures {
		return nil
	}
	wait := retryAfter(all[len(all)-GlobalFailures], GlobalWindow, now)
	if !now.Before(l.exhaustedUntil) {
		l.exhaustedUntil = now.Add(time.Duration(wait) * time.Second)
		if l.Log != nil {
			l.Log.Warn("global login failure budget exhausted: answering 429 to every client without a session",
				"failures", len(all), "window", GlobalWindow.String(), "budget", GlobalFailures, "retry_after", wait)
		}
	}
	return &RateLimitedError{RetryAfter: wait, Global: true}
}

// merged returns the times of local and remote attempts together, oldest
// first.
func merged(local []*attempt, remote []time.Time) []time.Time {
	out := make([]time.Time, 0, len(local)+len(remote))
	for _, a := range local {
		out = append(out, a.at)
	}
	out = append(out, remote...)
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// Check reports whether addr may try now; when not, it returns the wait in
// whole seconds (at least 1). It looks at addr's own failures only.
func (l *Limiter) Check(addr netip.Addr) (ok bool, retryAfter int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.check(LimitKey(addr), l.now(), false); e != nil {
		return false, e.RetryAfter
	}
	return true, 0
}

// Reservation is one attempt taken before its check runs. Until Release it
// counts as a failure, so parallel attempts cannot outrun the limit.
type Reservation struct {
	l    *Limiter
	key  netip.Prefix
	a    *attempt
	done bool
	// shared is the attempt's id among the cluster's (0: not shared).
	shared int64
}

// Reserve takes one attempt for addr, or refuses with *RateLimitedError
// when addr is locked out or, when global is true (the client has no
// session), when the global budget is spent. The attempt stays counted
// unless Release is called.
func (l *Limiter) Reserve(addr netip.Addr, global bool) (*Reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	key := LimitKey(addr)
	if e := l.check(key, now, global); e != nil {
		return nil, e
	}
	a := &attempt{at: now}
	l.add(key, a, now)
	r := &Reservation{l: l, key: key, a: a}
	if l.Shared != nil {
		r.shared = l.Shared.Add(key, now)
	}
	return r, nil
}

// add records a for key and in the global count; the caller holds mu.
func (l *Limiter) add(key netip.Prefix, a *attempt, now time.Time) {
	fs := l.prune(key, now)
	if fs == nil && len(l.failures) >= maxTracked {
		l.evictOldest()
	}
	fs = append(fs, a)
	if len(fs) > MaxFailures {
		fs = fs[len(fs)-MaxFailures:]
	}
	l.failures[key] = fs
	l.pruneGlobal(now)
	l.global = append(l.global, a)
	if len(l.global) > 4*GlobalFailures {
		l.global = l.global[len(l.global)-4*GlobalFailures:]
	}
}

// Release takes the attempt back: it was not a failure (the credential was
// right) or it never ran (the server was busy, the client left).
func (r *Reservation) Release() {
	if r == nil {
		return
	}
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	r.l.failures[r.key] = remove(r.l.failures[r.key], r.a)
	if len(r.l.failures[r.key]) == 0 {
		delete(r.l.failures, r.key)
	}
	r.l.global = remove(r.l.global, r.a)
	if r.shared != 0 && r.l.Shared != nil {
		r.l.Shared.Remove(r.shared)
	}
}

func remove(as []*attempt, a *attempt) []*attempt {
	for i, x := range as {
		if x == a {
			return append(as[:i:i], as[i+1:]...)
		}
	}
	return as
}

// Fail records one failed attempt from addr that was not reserved.
func (l *Limiter) Fail(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	key := LimitKey(addr)
	l.add(key, &attempt{at: now}, now)
	if l.Shared != nil {
		l.Shared.Add(key, now)
	}
}

// Reset forgets addr's failures (after a successful login). The global
// count keeps them: they were failures all the same.
func (l *Limiter) Reset(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.failures, LimitKey(addr))
}

func (l *Limiter) evictOldest() {
	var oldest netip.Prefix
	var at time.Time
	for k, fs := range l.failures {
		last := fs[len(fs)-1].at
		if at.IsZero() || last.Before(at) {
			oldest, at = k, last
		}
	}
	delete(l.failures, oldest)
}
