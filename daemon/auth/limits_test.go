package auth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFailuresCountPerSlash64(t *testing.T) {
	l := NewLimiter(nil)
	for i := 1; i <= MaxFailures; i++ {
		if _, err := l.Reserve(netip.MustParseAddr(fmt.Sprintf("2001:db8:1:2::%x", i)), true); err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	var limited *RateLimitedError
	if _, err := l.Reserve(netip.MustParseAddr("2001:db8:1:2:ffff:ffff:ffff:ffff"), true); !errors.As(err, &limited) || limited.Global {
		t.Fatalf("another address in the same /64: %v", err)
	}
	if _, err := l.Reserve(netip.MustParseAddr("2001:db8:1:3::1"), true); err != nil {
		t.Fatalf("the next /64: %v", err)
	}
	// IPv4 counts per address.
	for i := 1; i <= MaxFailures; i++ {
		l.Fail(netip.MustParseAddr("198.51.100.1"))
	}
	if ok, _ := l.Check(netip.MustParseAddr("198.51.100.2")); !ok {
		t.Fatal("a neighbouring IPv4 address was locked out")
	}
}

// TestParallelReservations: attempts are counted before they are checked,
// so many at once cannot get past the limit.
func TestParallelReservations(t *testing.T) {
	l := NewLimiter(nil)
	addr := netip.MustParseAddr("198.51.100.3")
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Reserve(addr, true); err == nil {
				mu.Lock()
				granted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if granted != MaxFailures {
		t.Fatalf("%d of 300 parallel attempts were let through, want %d", granted, MaxFailures)
	}
	// A released attempt (right credential) frees its place.
	l2 := NewLimiter(nil)
	for range 3 * MaxFailures {
		r, err := l2.Reserve(addr, true)
		if err != nil {
			t.Fatal(err)
		}
		r.Release()
	}
}

func TestGlobalBudget(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewLimiter(func() time.Time { return now })
	var logs bytes.Buffer
	l.Log = slog.New(slog.NewTextHandler(&logs, nil))
	for i := range GlobalFailures {
		if _, err := l.Reserve(netip.AddrFrom4([4]byte{203, 0, byte(i / 250), byte(1 + i%250)}), true); err != nil {
			t.Fatalf("failure %d: %v", i, err)
		}
		now = now.Add(100 * time.Millisecond)
	}
	fresh := netip.MustParseAddr("192.0.2.77")
	var limited *RateLimitedError
	_, err := l.Reserve(fresh, true)
	if !errors.As(err, &limited) || !limited.Global || limited.RetryAfter != 54 {
		t.Fatalf("after %d failures in a minute, a fresh address without a session: %v", GlobalFailures, err)
	}
	l.Reserve(fresh, true)
	if n := strings.Count(logs.String(), "global login failure budget exhausted"); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, logs.String())
	}
	if r, err := l.Reserve(fresh, false); err != nil {
		t.Fatalf("a client with a session: %v", err)
	} else {
		r.Release()
	}
	now = now.Add(54 * time.Second)
	if _, err := l.Reserve(fresh, true); err != nil {
		t.Fatalf("after the oldest failure left the minute: %v", err)
	}
}

func TestGateQueueAndPerClient(t *testing.T) {
	g := NewGate(1, 0, 2)
	hold := make(chan struct{})
	started := make(chan struct{})
	// Occupy the one slot by hand.
	if err := g.acquire(context.Background(), Ticket{Key: LimitKey(netip.MustParseAddr("10.0.0.1")), Keyed: true}); err != nil {
		t.Fatal(err)
	}
	first := Ticket{Key: LimitKey(netip.MustParseAddr("10.0.0.1")), Keyed: true}
	var limited *RateLimitedError
	// The same client again: refused at once.
	if err := g.acquire(context.Background(), first); !errors.As(err, &limited) || !limited.Busy {
		t.Fatalf("second run of one client: %v", err)
	}
	// Two wait, the third is refused at once.
	results := make(chan string, 4)
	for _, a := range []string{"10.0.0.2", "10.0.0.3"} {
		go func() {
			started <- struct{}{}
			tk := Ticket{Key: LimitKey(netip.MustParseAddr(a)), Keyed: true}
			if err := g.acquire(context.Background(), tk); err != nil {
				results <- a + " " + err.Error()
				return
			}
			<-hold
			g.release(tk)
			results <- a
		}()
		<-started
	}
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiting.Len() == 2 })
	if err := g.acquire(context.Background(), Ticket{Key: LimitKey(netip.MustParseAddr("10.0.0.4")), Keyed: true}); !errors.As(err, &limited) || !limited.Busy {
		t.Fatalf("full queue: %v", err)
	}
	// A known client goes ahead of the queue.
	known := Ticket{Key: LimitKey(netip.MustParseAddr("10.0.0.9")), Keyed: true, Priority: true}
	go func() {
		if err := g.acquire(context.Background(), known); err != nil {
			results <- "known " + err.Error()
			return
		}
		results <- "known"
		g.release(known)
	}()
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.priority.Len() == 1 })
	g.release(first)
	if got := <-results; got != "known" {
		t.Fatalf("first after the slot freed: %s", got)
	}
	close(hold)
	<-results
	<-results
	if g.free != 1 || len(g.inflight) != 0 {
		t.Fatalf("slots leaked: free %d, inflight %v", g.free, g.inflight)
	}
}

func TestGateWaitHonoursContext(t *testing.T) {
	g := NewGate(1, 0, 4)
	busyT := Ticket{Key: LimitKey(netip.MustParseAddr("10.0.1.1")), Keyed: true}
	if err := g.acquire(context.Background(), busyT); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	waiter := Ticket{Key: LimitKey(netip.MustParseAddr("10.0.1.2")), Keyed: true}
	if _, err := g.IDKey(ctx, waiter, []byte("pw"), []byte("salt-salt-salt-1"), 1, 64, 1, 32); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past the deadline: %v", err)
	}
	g.release(busyT)
	if _, err := g.IDKey(context.Background(), waiter, []byte("pw"), []byte("salt-salt-salt-1"), 1, 64, 1, 32); err != nil {
		t.Fatalf("after the wait was given up, the client is stuck: %v", err)
	}
	if g.free != 1 || len(g.inflight) != 0 || g.waiting.Len() != 0 {
		t.Fatalf("state leaked: free %d inflight %v queue %d", g.free, g.inflight, g.waiting.Len())
	}
}

// TestGateReservedSlot: with one slot kept for known clients, a flood of
// unknown ones never holds it, and a known client starts at once.
func TestGateReservedSlot(t *testing.T) {
	g := NewGate(2, 1, 8)
	flood := Ticket{Key: LimitKey(netip.MustParseAddr("10.0.2.1")), Keyed: true}
	if err := g.acquire(context.Background(), flood); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		second <- g.acquire(context.Background(), Ticket{Key: LimitKey(netip.MustParseAddr("10.0.2.2")), Keyed: true})
	}()
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiting.Len() == 1 })
	known := Ticket{Key: LimitKey(netip.MustParseAddr("10.0.2.9")), Keyed: true, Priority: true}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := g.acquire(ctx, known); err != nil {
		t.Fatalf("known client with the reserved slot free: %v", err)
	}
	// While the known client's hash runs, no unknown one starts, even when
	// a slot of theirs frees up.
	g.release(flood)
	select {
	case err := <-second:
		t.Fatalf("an unknown client started beside a known client's run: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.release(known)
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.free != 1 || g.running != 1 || g.priRuns != 0 {
		t.Fatalf("free %d running %d priority runs %d", g.free, g.running, g.priRuns)
	}
}

// TestGateReservedSlotNotTaken: the unknown clients' queue never takes the
// slot kept for known ones.
func TestGateReservedSlotNotTaken(t *testing.T) {
	g := NewGate(2, 1, 8)
	flood := Ticket{Key: LimitKey(netip.MustParseAddr("10.0.3.1")), Keyed: true}
	if err := g.acquire(context.Background(), flood); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		second <- g.acquire(context.Background(), Ticket{Key: LimitKey(netip.MustParseAddr("10.0.3.2")), Keyed: true})
	}()
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiting.Len() == 1 })
	known := Ticket{Key: LimitKey(netip.MustParseAddr("10.0.3.9")), Keyed: true, Priority: true}
	if err := g.acquire(context.Background(), known); err != nil {
		t.Fatal(err)
	}
	g.release(known)
	select {
	case err := <-second:
		t.Fatalf("an unknown client took the reserved slot: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.release(flood)
	if err := <-second; err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("condition not reached in 1 s")
}

// TestEveryArgon2UseGoesThroughTheGate: argon2.IDKey is called in one
// place, Gate.IDKey, so no argon2id run escapes the bound.
func TestEveryArgon2UseGoesThroughTheGate(t *testing.T) {
	root := filepath.Join("..", "..")
	var offenders []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || d.Name() == "tools") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if _, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly); err != nil {
			return err
		}
		if strings.Contains(string(src), "argon2.IDKey(") || strings.Contains(string(src), "argon2.Key(") {
			offenders = append(offenders, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(offenders) != 1 || !strings.HasSuffix(offenders[0], filepath.Join("daemon", "auth", "argon.go")) {
		t.Fatalf("argon2 is called outside Gate.IDKey: %v", offenders)
	}
}
