package store

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"time"
)

// Gate token kinds.
const (
	GateSession = "session"
	GateCode    = "code"
)

// PutGateToken stores a gate session or sign-in code (by the SHA-256 of
// its secret, hex) for a tunnel until expires, so every edge honours it.
func (s *Store) PutGateToken(ctx context.Context, hash, kind string, tunnelID int64, expires time.Time, who GateWho) error {
	_, err := s.exec(ctx, `INSERT INTO gate_tokens(token_hash, kind, tunnel_id, expires_at, who_user, who_email) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT(token_hash) DO UPDATE SET kind = excluded.kind, tunnel_id = excluded.tunnel_id, expires_at = excluded.expires_at,
			who_user = excluded.who_user, who_email = excluded.who_email`,
		hash, kind, tunnelID, expires.UnixMilli(), who.User, who.Email)
	return err
}

// GateWho is who a gate token signs in (access gates of mode sso; empty
// for the others).
type GateWho struct{ User, Email string }

// GateToken returns the tunnel, expiry and visitor of a live gate token of
// this kind; ErrNotFound when there is none (unknown, expired, ended).
func (s *Store) GateToken(ctx context.Context, hash, kind string, now time.Time) (tunnelID int64, expires time.Time, who GateWho, err error) {
	var e int64
	err = s.queryRow(ctx, "SELECT tunnel_id, expires_at, who_user, who_email FROM gate_tokens WHERE token_hash = ? AND kind = ? AND expires_at > ?",
		hash, kind, now.UnixMilli()).Scan(&tunnelID, &e, &who.User, &who.Email)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, time.Time{}, GateWho{}, ErrNotFound
	}
	return tunnelID, time.UnixMilli(e).UTC(), who, err
}

// TakeGateToken deletes a live gate token of this kind and returns its
// tunnel: of two edges redeeming one sign-in code, exactly one gets it.
func (s *Store) TakeGateToken(ctx context.Context, hash, kind string, now time.Time) (int64, GateWho, error) {
	var id int64
	var who GateWho
	err := s.writeReturning(ctx, "DELETE FROM gate_tokens WHERE token_hash = ? AND kind = ? AND expires_at > ? RETURNING tunnel_id, who_user, who_email",
		[]any{hash, kind, now.UnixMilli()}, &id, &who.User, &who.Email)
	s.noteWrite(err)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, GateWho{}, ErrNotFound
	}
	if err == nil {
		s.wrote(ctx)
	}
	return id, who, err
}

// DeleteGateToken ends one gate session or code.
func (s *Store) DeleteGateToken(ctx context.Context, hash string) error {
	_, err := s.exec(ctx, "DELETE FROM gate_tokens WHERE token_hash = ?", hash)
	return err
}

// DeleteGateTokensOf ends every session and code of a tunnel (its access
// or password changed, or it is gone).
func (s *Store) DeleteGateTokensOf(ctx context.Context, tunnelID int64) error {
	_, err := s.exec(ctx, "DELETE FROM gate_tokens WHERE tunnel_id = ?", tunnelID)
	return err
}

// PruneGateTokens deletes expired gate tokens.
func (s *Store) PruneGateTokens(ctx context.Context, now time.Time) error {
	_, err := s.exec(ctx, "DELETE FROM gate_tokens WHERE expires_at <= ?", now.UnixMilli())
	return err
}

// AuthFailure is one failed authentication some edge counted.
type AuthFailure struct {
	ID   int64
	Edge string
	Key  string
	At   time.Time
}

// InsertAuthFailure records a failed authentication counted by edge and
// returns its id.
func (s *Store) InsertAuthFailure(ctx context.Context, edge, key string, at time.Time) (int64, error) {
	return s.insertID(ctx, "INSERT INTO auth_failures(edge, key, at) VALUES (?, ?, ?)", edge, key, at.UnixMilli())
}

// DeleteAuthFailure takes back an attempt that turned out not to fail.
func (s *Store) DeleteAuthFailure(ctx context.Context, id int64) error {
	_, err := s.exec(ctx, "DELETE FROM auth_failures WHERE id = ?", id)
	return err
}

// OtherAuthFailures returns, oldest first, the times of the failures that
// edges other than edge recorded: the newest perKey of key since keySince,
// and the newest global of all of key's scope since globalSince.
func (s *Store) OtherAuthFailures(ctx context.Context, edge, key string, keySince time.Time, perKey int, globalSince time.Time, global int) (forKey, all []time.Time, err error) {
	read := func(q string, args ...any) ([]time.Time, error) {
		rows, err := s.query(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []time.Time
		for rows.Next() {
			var at int64
			if err := rows.Scan(&at); err != nil {
				return nil, err
			}
			out = append(out, time.UnixMilli(at).UTC())
		}
		slices.Reverse(out)
		return out, rows.Err()
	}
	forKey, err = read("SELECT at FROM auth_failures WHERE key = ? AND edge <> ? AND at >= ? ORDER BY at DESC LIMIT ?",
		key, edge, keySince.UnixMilli(), perKey)
	if err != nil {
		return nil, nil, err
	}
	// The global count is the key's scope's own: a key of a scope reads
	// "<scope>@<prefix>" ('@' is never in a prefix), the dashboard's
	// login has none. (LIKE with '@' and '%' alone matches alike on both
	// engines; a scope's own prefix is compared with substr, as LIKE
	// ignores case on SQLite alone.)
	scoped, args := "key NOT LIKE '%@%'", []any{edge, globalSince.UnixMilli()}
	if at := strings.IndexByte(key, '@'); at >= 0 {
		scoped = "substr(key, 1, ?) = ?"
		args = append(args, at+1, key[:at+1])
	}
	all, err = read("SELECT at FROM auth_failures WHERE edge <> ? AND at >= ? AND "+scoped+" ORDER BY at DESC LIMIT ?",
		append(args, global)...)
	return forKey, all, err
}

// AuthFailuresAfter returns the failures other edges than edge recorded
// with an id above after and no older than since, oldest first, at most
// limit of them.
func (s *Store) AuthFailuresAfter(ctx context.Context, edge string, after int64, since time.Time, limit int) ([]AuthFailure, error) {
	rows, err := s.query(ctx, "SELECT id, edge, key, at FROM auth_failures WHERE id > ? AND edge <> ? AND at >= ? ORDER BY id LIMIT ?",
		after, edge, since.UnixMilli(), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AuthFailure
	for rows.Next() {
		var f AuthFailure
		var at int64
		if err := rows.Scan(&f.ID, &f.Edge, &f.Key, &at); err != nil {
			return nil, err
		}
		f.At = time.UnixMilli(at).UTC()
		out = append(out, f)
	}
	return out, rows.Err()
}

// PruneAuthFailures deletes failures older than before.
func (s *Store) PruneAuthFailures(ctx context.Context, before time.Time) error {
	_, err := s.exec(ctx, "DELETE FROM auth_failures WHERE at < ?", before.UnixMilli())
	return err
}
