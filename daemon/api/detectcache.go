package api

import (
	"context"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/firewall"
)

// detectCacheFor is how long a firewall detection is reused.
const detectCacheFor = 5 * time.Second

// detectCache keeps the latest firewall detection; the mutex is held while
// a detection runs, so concurrent callers wait for it instead of starting
// their own.
type detectCache struct {
	mu  sync.Mutex
	at  time.Time
	ok  bool
	val firewall.Detection
}

func (c *detectCache) get(ctx context.Context, now time.Time, detect func(context.Context) firewall.Detection) firewall.Detection {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok && now.Sub(c.at) < detectCacheFor && !now.Before(c.at) {
		return c.val
	}
	c.val, c.at, c.ok = detect(ctx), now, true
	return c.val
}

// forget drops the cached detection (the mode is changing).
func (c *detectCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ok = false
}
