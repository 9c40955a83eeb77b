package store

import (
	"sync"
)

// changes counts writes to the database's files by any process: the admin
// commands (reset-password, disable-2fa) open the database directly while
// the daemon runs, so a cache of rows in the daemon cannot learn of their
// changes from its own code paths.
type changes struct {
	mu    sync.Mutex
	watch watcher // nil until the first Changes call; noWatch when unavailable
	n     uint64
}

// watcher reports whether anything was written since its last call.
type watcher interface {
	written() bool
	close()
}

// noWatch is used where the data directory cannot be watched: every call
// counts as a change, so callers never trust a cached row.
type noWatch struct{}

func (noWatch) written() bool { return true }
func (noWatch) close()        {}

// Changes returns a number that differs from any earlier answer once a
// commit to the database, by this process or another one, has returned;
// the same number means nothing was committed in between. Caches of rows
// compare it before trusting what they hold.
//
// On PostgreSQL every commit is announced with NOTIFY, and a connection of
// the store's own LISTENs (see pgListen); while it is not listening, every
// call counts as a change.
//
// SQLite writes every commit to the -wal file (and the connection closing
// afterwards writes and closes the files), so watching the data directory
// for writes, creations, deletions and closes after writing sees each one.
func (s *Store) Changes() uint64 {
	c := &s.changes
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watch == nil {
		var w watcher
		var err error
		if s.pg {
			w = listenPostgres(s.url, s.heard, s.heardLog, s.missed)
		} else {
			w, err = watchDir(s.dir)
		}
		if err != nil {
			c.watch = noWatch{}
		} else {
			c.watch = w
		}
		c.n++
	}
	if c.watch.written() {
		c.n++
	}
	return c.n
}

// bump counts a commit of this process's own at once, before any
// notification of it comes back.
func (c *changes) bump() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *changes) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watch != nil {
		c.watch.close()
		c.watch = noWatch{}
	}
}

// MemoMax bounds the values one Memo keeps (a memo keyed by what a client
// presents must not grow without bound).
const MemoMax = 4096

// Memo keeps values read from the database, or computed from what it
// holds, one per key, until Changes moves: a value asked for again and
// again between writes is read once, and any commit, by this process or
// another, drops them all. Only successful loads are kept, at most
// MemoMax of them: when full, the memo starts over. The zero value is
// ready to use.
//
// While the database cannot be reached (Unavailable: PostgreSQL
// restarting, failing over, cut off), a key's last value read stands in
// for the failed load, however old: machines, tunnels and gates keep
// working from memory, and the next successful load replaces it. A load
// that fails otherwise (not found, refused) forgets that last value.
type Memo[K comparable, V any] struct {
	mu     sync.Mutex
	latest uint64 // the highest count a Get saw; vals were read under it
	vals   map[K]V
	// last holds each key's latest value read, across counts, for loads
	// that fail because the database is gone.
	last map[K]V
}

// Get returns the value held for k under s's current count, or what load
// reads. load must depend on nothing but the database and k.
func (c *Memo[K, V]) Get(s *Store, k K, load func() (V, error)) (V, error) {
	n := s.Changes()
	c.mu.Lock()
	if n > c.latest {
		c.latest, c.vals = n, nil
	}
	v, hit := c.vals[k]
	hit = hit && c.latest == n
	c.mu.Unlock()
	if hit {
		return v, nil
	}
	v, err := load()
	if err != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		if last, ok := c.last[k]; ok {
			if Unavailable(err) {
				return last, nil
			}
			delete(c.last, k)
		}
		return v, err
	}
	c.mu.Lock()
	// Kept only if no later count was seen meanwhile: a value read before
	// a commit that the count has not shown yet is dropped by the next
	// Get, which sees the count move.
	if c.latest == n {
		if c.vals == nil || len(c.vals) >= MemoMax {
			c.vals = make(map[K]V)
		}
		c.vals[k] = v
	}
	if c.last == nil || len(c.last) >= MemoMax {
		c.last = make(map[K]V)
	}
	c.last[k] = v
	c.mu.Unlock()
	return v, nil
}

// Snapshot is a Memo of one value (such as the machine list).
type Snapshot[T any] struct{ m Memo[struct{}, T] }

// Get returns the value held for s's current count, or what load reads.
// load must depend on nothing but the database (and what never changes).
func (c *Snapshot[T]) Get(s *Store, load func() (T, error)) (T, error) {
	return c.m.Get(s, struct{}{}, load)
}
