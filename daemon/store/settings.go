package store

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// ErrNotFound is returned when a looked-up row does not exist.
var ErrNotFound = errors.New("not found")

// settingsCache remembers settings read since the last commit to the
// database. Several settings are read on every API request that shows an
// address (the domain, the server host, the bind address, the firewall
// mode), and reading them was a third of the daemon's processor time in
// `make bench`'s api figure. They change only when the operator changes
// them, so each value read is kept until Changes moves, that is until
// anything is committed, by this process or by an admin command from
// another one (see Changes for why that is exact).
type settingsCache struct {
	mu      sync.Mutex
	changes uint64 // the highest Changes count seen; vals were read under it
	vals    map[string]cachedSetting
}

type cachedSetting struct {
	value string
	found bool
}

// GetSetting returns a setting's value, or ErrNotFound.
func (s *Store) GetSetting(ctx context.Context, key string) (string, error) {
	c := &s.settings
	n := s.Changes()
	c.mu.Lock()
	if n > c.changes {
		c.vals, c.changes = nil, n
	}
	v, hit := c.vals[key]
	hit = hit && c.changes == n
	c.mu.Unlock()
	if hit {
		if !v.found {
			return "", ErrNotFound
		}
		return v.value, nil
	}
	v = cachedSetting{}
	err := s.db.QueryRowContext(ctx, "SELECT value FROM settings WHERE key = ?", key).Scan(&v.value)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil && err != ErrNotFound {
		return "", err
	}
	v.found = err == nil
	c.mu.Lock()
	// Kept only if nothing was seen committed since n: a value read before
	// a commit that the count has not shown yet is dropped by the next
	// call, which sees the count move.
	if c.changes == n {
		if c.vals == nil {
			c.vals = make(map[string]cachedSetting)
		}
		c.vals[key] = v
	}
	c.mu.Unlock()
	return v.value, err
}

// SetSetting inserts or replaces a setting.
func (s *Store) SetSetting(ctx context.Context, key, value string) error {
	_, err := s.db.ExecContext(ctx,
		"INSERT INTO settings(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value)
	return err
}

// SetSettingIfAbsent inserts a setting only when it does not exist yet and
// reports whether it did. It makes "first writer wins" decisions (such as
// the initial password) atomic.
func (s *Store) SetSettingIfAbsent(ctx context.Context, key, value string) (bool, error) {
	res, err := s.db.ExecContext(ctx, "INSERT INTO settings(key, value) VALUES (?, ?) ON CONFLICT(key) DO NOTHING", key, value)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}
