package auth

import (
	"container/list"
	"context"
	"net/netip"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/argon2"
)

// The argon2id bound: every argon2id run in the daemon (passwords, backup
// codes) goes through one Gate. Each run holds up to 64 MiB, so the number
// running at once bounds memory; a short queue bounds how long a request
// waits, and a full queue answers 429 at once instead of piling up.
const (
	// ArgonSlots is how many argon2id runs may be in flight at once.
	ArgonSlots = 2
	// ArgonReserved of the slots serve only priority runs (addresses that
	// have logged in before), so a flood from elsewhere never makes the
	// operator wait for someone else's hash.
	ArgonReserved = 1
	// ArgonQueue is how many more may wait for a slot; priority waiters
	// are not counted here.
	ArgonQueue = 8
	// busyRetryAfter is the Retry-After of a 429 for a full queue or an
	// address whose previous check is still running.
	busyRetryAfter = 1
)

// Gate bounds concurrent argon2id work: at most slots at once (of which
// reserved only for priority runs), at most queue waiting (others get 429),
// at most one in flight per client (LimitKey), and known clients ahead of
// unknown ones.
type Gate struct {
	mu       sync.Mutex
	free     int // slots not running
	normal   int // slots a non-priority run may hold
	running  int // non-priority runs holding a slot
	priRuns  int // priority runs holding a slot
	queue    int
	priority list.List // of *waiter
	waiting  list.List // of *waiter, non-priority
	inflight map[netip.Prefix]bool
	runs     atomic.Uint64
	// freeing: a run is returning memory to the system; again: another
	// run ended meanwhile, so the memory it held is returned once more.
	freeing, again bool
	freeOS         func() // debug.FreeOSMemory; tests count the calls
}

// Runs reports how many argon2id runs g has done.
func (g *Gate) Runs() uint64 { return g.runs.Load() }

type waiter struct{ ready chan struct{} }

// NewGate returns a Gate with slots runs at once, reserved of them for
// priority runs, and queue waiters.
func NewGate(slots, reserved, queue int) *Gate {
	return &Gate{free: slots, normal: max(1, slots-reserved), queue: queue, inflight: map[netip.Prefix]bool{}, freeOS: debug.FreeOSMemory}
}

// Ticket says who a run is for: Key is the client (LimitKey); Keyed false
// means no client (root's command line). Priority puts it ahead of the
// queue.
type Ticket struct {
	Key      netip.Prefix
	Keyed    bool
	Priority bool
}

func busy() error {
	return &RateLimitedError{RetryAfter: busyRetryAfter, Busy: true}
}

// acquire waits for a slot for t, honouring ctx.
func (g *Gate) acquire(ctx context.Context, t Ticket) error {
	g.mu.Lock()
	if t.Keyed {
		if g.inflight[t.Key] {
			g.mu.Unlock()
			return busy()
		}
		g.inflight[t.Key] = true
	}
	q := &g.priority
	if t.Priority {
		if g.free > 0 && g.priority.Len() == 0 {
			g.free--
			g.priRuns++
			g.mu.Unlock()
			return nil
		}
	} else {
		if g.canStartNormal() && g.waiting.Len() == 0 {
			g.free--
			g.running++
			g.mu.Unlock()
			return nil
		}
		if g.waiting.Len() >= g.queue {
			g.unkey(t)
			g.mu.Unlock()
			return busy()
		}
		q = &g.waiting
	}
	w := &waiter{ready: make(chan struct{})}
	el := q.PushBack(w)
	g.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		select {
		case <-w.ready:
			// The slot was handed over as ctx ended: pass it on.
			g.mu.Unlock()
			g.release(t)
		default:
			q.Remove(el)
			g.unkey(t)
			g.mu.Unlock()
		}
		return ctx.Err()
	}
}

func (g *Gate) unkey(t Ticket) {
	if t.Keyed {
		delete(g.inflight, t.Key)
	}
}

// canStartNormal reports whether a non-priority run may start now: a slot
// is free, the non-priority share is not used up, and no priority run is
// waiting or running (a known client's hash then has the CPU to itself,
// apart from runs that had already started).
func (g *Gate) canStartNormal() bool {
	return g.free > 0 && g.running < g.normal && g.priRuns == 0 && g.priority.Len() == 0
}

// release frees t's slot and hands it on: to the first priority waiter,
// else to the first waiter in the queue if a non-priority run may start.
func (g *Gate) release(t Ticket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unkey(t)
	g.free++
	if t.Priority {
		g.priRuns--
	} else {
		g.running--
	}
	if el := g.priority.Front(); el != nil {
		g.priority.Remove(el)
		g.free--
		g.priRuns++
		close(el.Value.(*waiter).ready)
		return
	}
	for g.canStartNormal() && g.waiting.Len() > 0 {
		el := g.waiting.Front()
		g.waiting.Remove(el)
		g.free--
		g.running++
		close(el.Value.(*waiter).ready)
	}
}

// lowCostIDKey: LowCostForTests was called (only ever in a test binary).
var lowCostIDKey atomic.Bool

// IDKey runs argon2.IDKey once a slot is free. It fails with a
// *RateLimitedError (Busy) when the queue is full or t's client already has
// a run in flight, and with ctx's error when the caller gives up waiting.
func (g *Gate) IDKey(ctx context.Context, t Ticket, password, salt []byte, time, memory uint32, threads uint8, keyLen uint32) ([]byte, error) {
	if lowCostIDKey.Load() {
		time, memory, threads = 1, 1024, 1
	}
	if err := g.acquire(ctx, t); err != nil {
		return nil, err
	}
	g.runs.Add(1)
	key := func() []byte {
		defer g.release(t)
		return argon2.IDKey(password, salt, time, memory, threads, keyLen)
	}()
	g.returnMemory()
	return key, nil
}

// returnMemory gives argon2id's working memory (64 MiB a run) back to the
// system once no run is in flight or waiting: the heap it grew stays
// otherwise, and an idle daemon kept about 160 MB resident for minutes
// after one login. Under a flood runs follow each other and nothing is
// freed between them.
//
// It returns the memory before the caller answers (a collection and the
// release take about 5 ms, against the hash's hundreds): a client that
// logs in right after the setup then finds the setup's memory returned,
// instead of growing the heap while a collection in the background still
// ran. A run that ends while another returns memory is not skipped: the
// one returning goes round once more, as the memory that run held was
// still in use during the first collection.
func (g *Gate) returnMemory() {
	g.mu.Lock()
	if !g.idle() {
		g.mu.Unlock()
		return
	}
	if g.freeing {
		g.again = true
		g.mu.Unlock()
		return
	}
	g.freeing = true
	for {
		g.mu.Unlock()
		g.freeOS()
		g.mu.Lock()
		if !g.again || !g.idle() {
			// A run that has started since will return memory when it ends.
			g.freeing, g.again = false, false
			g.mu.Unlock()
			return
		}
		g.again = false
	}
}

// idle reports whether no run is in flight or waiting; g.mu is held.
func (g *Gate) idle() bool {
	return g.running == 0 && g.priRuns == 0 && g.waiting.Len() == 0 && g.priority.Len() == 0
}

// defaultGate is the daemon's one bound (the command line's too, in its own
// process).
var defaultGate = NewGate(ArgonSlots, ArgonReserved, ArgonQueue)
