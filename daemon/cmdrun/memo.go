package cmdrun

import (
	"slices"
	"strings"
	"sync"
)

// Memo keeps what programs answered while the files the answers depend on
// are unchanged: a version, an import check. Starting a program to ask is
// costly next to the page that shows the answer (Python about 0.15 CPU-s,
// caddy about 0.1), and the dashboard asks on every load. An upgrade or a
// removal changes a file's Identity, so the next Get asks again. Runners
// that cannot locate programs (tests' own) are never answered from memory.
type Memo struct {
	mu sync.Mutex
	m  map[string]memoEntry
}

type memoEntry struct {
	value string
	files []string // programs by name, then files by path
	ids   []string // their Identity when the answer was given
}

// identities resolves files (a name without a slash through the runner)
// to their identities; ok is false when any cannot be resolved.
func identities(run Runner, files []string) (ids []string, ok bool) {
	loc, can := run.(Locator)
	if !can {
		return nil, false
	}
	for _, f := range files {
		if !strings.Contains(f, "/") {
			p, err := loc.Locate(f)
			if err != nil {
				return nil, false
			}
			f = p
		}
		id := Identity(f)
		if id == "" {
			return nil, false
		}
		ids = append(ids, id)
	}
	return ids, true
}

// Get is the answer kept for key, if the files it was kept with are still
// the same.
func (c *Memo) Get(run Runner, key string) (string, bool) {
	c.mu.Lock()
	f, ok := c.m[key]
	c.mu.Unlock()
	if !ok {
		return "", false
	}
	ids, ok := identities(run, f.files)
	if !ok || !slices.Equal(ids, f.ids) {
		return "", false
	}
	return f.value, true
}

// Put keeps value for key while files (program names, resolved through
// run, or paths) stay the same. Nothing is kept when run cannot locate
// them.
func (c *Memo) Put(run Runner, key, value string, files ...string) {
	ids, ok := identities(run, files)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]memoEntry{}
	}
	c.m[key] = memoEntry{value: value, files: files, ids: ids}
}
