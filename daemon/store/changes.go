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
// SQLite writes every commit to the -wal file (and the connection closing
// afterwards writes and closes the files), so watching the data directory
// for writes, creations, deletions and closes after writing sees each one.
func (s *Store) Changes() uint64 {
	c := &s.changes
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watch == nil {
		w, err := watchDir(s.dir)
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

func (c *changes) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watch != nil {
		c.watch.close()
		c.watch = noWatch{}
	}
}

// Snapshot keeps one value read from the database, or computed from what
// it holds (such as the machine list), until Changes moves, so a value
// asked for again and again between writes is read once. The zero value
// is ready to use.
type Snapshot[T any] struct {
	mu     sync.Mutex
	latest uint64 // the highest count a Get saw
	held   bool   // v was read under latest
	v      T
}

// Get returns the value held for s's current count, or what load reads.
// load must depend on nothing but the database (and what never changes).
func (c *Snapshot[T]) Get(s *Store, load func() (T, error)) (T, error) {
	n := s.Changes()
	c.mu.Lock()
	if n > c.latest {
		var zero T
		c.latest, c.held, c.v = n, false, zero
	}
	if c.held && c.latest == n {
		v := c.v
		c.mu.Unlock()
		return v, nil
	}
	c.mu.Unlock()
	v, err := load()
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	// Held only if no later count was seen meanwhile: a value read before
	// a commit that the count has not shown yet is dropped by the next
	// Get, which sees the count move.
	if c.latest == n {
		c.v, c.held = v, true
	}
	c.mu.Unlock()
	return v, nil
}
