package store

import (
	"context"
	"database/sql"
	"errors"
)

// ErrNotFound is returned when a looked-up row does not exist.
var ErrNotFound = errors.New("not found")

// cachedSetting is a setting as read, absent ones included. Settings read
// are remembered until the next commit to the database (Store.settings, a
// Memo): several are read on every API request that shows an address (the
// domain, the server host, the bind address, the firewall mode), and
// reading them was a third of the daemon's processor time in
// `make bench`'s api figure. They change only when the operator changes
// them, so each value read is kept until Changes moves, that is until
// anything is committed, by this process or by an admin command from
// another one (see Changes for why that is exact).
type cachedSetting struct {
	value string
	found bool
}

// GetSetting returns a setting's value, or ErrNotFound.
func (s *Store) GetSetting(ctx context.Context, key string) (string, error) {
	v, err := s.settings.Get(s, key, func() (cachedSetting, error) {
		var v cachedSetting
		err := s.queryRow(ctx, "SELECT value FROM settings WHERE key = ?", key).Scan(&v.value)
		if errors.Is(err, sql.ErrNoRows) {
			return v, nil // absent is remembered too
		}
		v.found = err == nil
		return v, err
	})
	if err != nil {
		return "", err
	}
	if !v.found {
		return "", ErrNotFound
	}
	return v.value, nil
}

// SetSetting inserts or replaces a setting.
func (s *Store) SetSetting(ctx context.Context, key, value string) error {
	_, err := s.exec(ctx,
		"INSERT INTO settings(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value)
	if err == nil {
		s.changed(TopicSettings)
	}
	return err
}

// MoveSetting moves the value of key from to key to, in one transaction:
// to keeps a value it already has, and from is gone either way. Nothing
// happens when from has no value.
func (s *Store) MoveSetting(ctx context.Context, from, to string) error {
	moved := false
	err := s.Tx(ctx, func(tx *Tx) error {
		var v string
		err := tx.queryRow(ctx, "SELECT value FROM settings WHERE key = ?", from).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			moved = false
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "INSERT INTO settings(key, value) VALUES (?, ?) ON CONFLICT(key) DO NOTHING", to, v); err != nil {
			return err
		}
		_, err = tx.exec(ctx, "DELETE FROM settings WHERE key = ?", from)
		moved = err == nil
		return err
	})
	if moved {
		s.changed(TopicSettings)
	}
	return err
}

// SetSettingIfAbsent inserts a setting only when it does not exist yet and
// reports whether it did. It makes "first writer wins" decisions (such as
// the initial password) atomic.
func (s *Store) SetSettingIfAbsent(ctx context.Context, key, value string) (bool, error) {
	res, err := s.exec(ctx, "INSERT INTO settings(key, value) VALUES (?, ?) ON CONFLICT(key) DO NOTHING", key, value)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if n == 1 {
		s.changed(TopicSettings)
	} else if err == nil {
		// Another writer has the key, maybe so lately that this process's
		// caches have not heard of it (a concurrent insert in this
		// process counts its commit only after it returns; another
		// process's notification comes when it comes): a GetSetting right
		// after must read it, not a remembered absence.
		s.changes.bump()
	}
	return n == 1, err
}

// setSetting is SetSetting within tx.
func setSetting(ctx context.Context, tx *Tx, key, value string) error {
	_, err := tx.exec(ctx, "INSERT INTO settings(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value)
	return err
}
