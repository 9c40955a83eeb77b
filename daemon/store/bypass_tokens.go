package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// BypassToken is a secret an app sends to pass an http tunnel's gate
// without a cookie. Only its SHA-256 hash (hex) is kept.
type BypassToken struct {
	ID        int64
	TunnelID  int64
	Name      string
	Hash      string
	CreatedAt time.Time
	ExpiresAt time.Time
}

const bypassSelect = "SELECT id, tunnel_id, name, token_hash, created_at, expires_at FROM tunnel_bypass_tokens"

func scanBypass(r rowScanner) (BypassToken, error) {
	var b BypassToken
	var created, expires int64
	err := r.Scan(&b.ID, &b.TunnelID, &b.Name, &b.Hash, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return b, ErrNotFound
	}
	b.CreatedAt, b.ExpiresAt = time.UnixMilli(created).UTC(), time.UnixMilli(expires).UTC()
	return b, err
}

// InsertBypassToken stores b (its ID is set on return): ErrNotFound when
// the tunnel is gone, a *ConflictError ("name") when the tunnel has a
// token of that name.
func (s *Store) InsertBypassToken(ctx context.Context, b BypassToken) (BypassToken, error) {
	err := s.Tx(ctx, func(tx *Tx) error {
		var one int
		if err := tx.queryRow(ctx, "SELECT 1 FROM tunnels WHERE id = ?", b.TunnelID).Scan(&one); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return ErrNotFound
			}
			return err
		}
		id, err := tx.insertID(ctx, `INSERT INTO tunnel_bypass_tokens(tunnel_id, name, token_hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?)`,
			b.TunnelID, b.Name, b.Hash, b.CreatedAt.UnixMilli(), b.ExpiresAt.UnixMilli())
		if _, ok := uniqueViolation(err); ok {
			return &ConflictError{Field: "name"}
		}
		b.ID = id
		return err
	})
	return b, s.announce(err, TopicTunnels)
}

// BypassTokens lists a tunnel's tokens, or every tunnel's when tunnelID
// is 0, oldest first.
func (s *Store) BypassTokens(ctx context.Context, tunnelID int64) ([]BypassToken, error) {
	q, args := bypassSelect+" ORDER BY id", []any{}
	if tunnelID != 0 {
		q, args = bypassSelect+" WHERE tunnel_id = ? ORDER BY id", []any{tunnelID}
	}
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []BypassToken
	for rows.Next() {
		b, err := scanBypass(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// DeleteBypassToken revokes token id of a tunnel and returns it;
// ErrNotFound when the tunnel has no such token.
func (s *Store) DeleteBypassToken(ctx context.Context, tunnelID, id int64) (BypassToken, error) {
	var b BypassToken
	err := s.Tx(ctx, func(tx *Tx) error {
		var err error
		if b, err = scanBypass(tx.queryRow(ctx, bypassSelect+" WHERE id = ? AND tunnel_id = ?", id, tunnelID)); err != nil {
			return err
		}
		return affectOne(tx.exec(ctx, "DELETE FROM tunnel_bypass_tokens WHERE id = ?", id))
	})
	return b, s.announce(err, TopicTunnels)
}
