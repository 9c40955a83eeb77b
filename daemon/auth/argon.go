package auth

import (
	"container/list"
	"context"
	"net/netip"
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
	// ArgonQueue is how many more may wait for a slot; priority waiters
	// (addresses that have logged in before) are not counted here.
	ArgonQueue = 8
	// busyRetryAfter is the Retry-After of a 429 for a full queue or an
	// address whose previous check is still running.
	busyRetryAfter = 1
)

// Gate bounds concurrent argon2id work: at most slots at once, at most
// queue waiting (others get 429), at most one in flight per client
// (LimitKey), and known clients ahead of unknown ones.
type Gate struct {
	mu       sync.Mutex
	free     int
	queue    int
	priority list.List // of *waiter
	normal   list.List // of *waiter
	inflight map[netip.Prefix]bool
	runs     atomic.Uint64
}

// Runs reports how many argon2id runs g has done.
func (g *Gate) Runs() uint64 { return g.runs.Load() }

type waiter struct{ ready chan struct{} }

// NewGate returns a Gate with slots runs at once and queue waiters.
func NewGate(slots, queue int) *Gate {
	return &Gate{free: slots, queue: queue, inflight: map[netip.Prefix]bool{}}
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
	if g.free > 0 && g.priority.Len() == 0 && g.normal.Len() == 0 {
		g.free--
		g.mu.Unlock()
		return nil
	}
	q := &g.priority
	if !t.Priority {
		if g.normal.Len() >= g.queue {
			g.unkey(t)
			g.mu.Unlock()
			return busy()
		}
		q = &g.normal
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

// release frees t's slot, handing it to the first priority waiter, else
// the first waiter in the queue.
func (g *Gate) release(t Ticket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unkey(t)
	for _, q := range []*list.List{&g.priority, &g.normal} {
		if el := q.Front(); el != nil {
			q.Remove(el)
			close(el.Value.(*waiter).ready)
			return
		}
	}
	g.free++
}

// IDKey runs argon2.IDKey once a slot is free. It fails with a
// *RateLimitedError (Busy) when the queue is full or t's client already has
// a run in flight, and with ctx's error when the caller gives up waiting.
func (g *Gate) IDKey(ctx context.Context, t Ticket, password, salt []byte, time, memory uint32, threads uint8, keyLen uint32) ([]byte, error) {
	if err := g.acquire(ctx, t); err != nil {
		return nil, err
	}
	defer g.release(t)
	g.runs.Add(1)
	return argon2.IDKey(password, salt, time, memory, threads, keyLen), nil
}

// defaultGate is the daemon's one bound (the command line's too, in its own
// process).
var defaultGate = NewGate(ArgonSlots, ArgonQueue)
