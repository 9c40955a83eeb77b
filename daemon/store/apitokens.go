package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// TopicAPITokens is announced when an API token is created, revoked or
// used (its last use).
const TopicAPITokens = "api_tokens"

// APIToken is an API token as stored (its secret only as a hash).
type APIToken struct {
	ID           int64
	Name         string
	Scope        string // "read" or "write"
	TokenHash    string
	CreatedAt    time.Time
	ExpiresAt    time.Time
	LastUsedAt   time.Time // zero when never used
	LastUsedAddr string
}

// ErrTokenNameTaken: another API token has that name.
var ErrTokenNameTaken = errors.New("an API token with that name exists")

const apiTokenSelect = "SELECT id, name, scope, token_hash, created_at, expires_at, last_used_at, last_used_addr FROM api_tokens"

func scanAPIToken(r rowScanner) (APIToken, error) {
	var t APIToken
	var created, expires int64
	var used sql.NullInt64
	err := r.Scan(&t.ID, &t.Name, &t.Scope, &t.TokenHash, &created, &expires, &used, &t.LastUsedAddr)
	if errors.Is(err, sql.ErrNoRows) {
		return t, ErrNotFound
	}
	t.CreatedAt, t.ExpiresAt = time.UnixMilli(created).UTC(), time.UnixMilli(expires).UTC()
	if used.Valid {
		t.LastUsedAt = time.UnixMilli(used.Int64).UTC()
	}
	return t, err
}

// InsertAPIToken stores a new token; ErrTokenNameTaken when its name is.
func (s *Store) InsertAPIToken(ctx context.Context, t APIToken) (int64, error) {
	id, err := s.insertID(ctx, "INSERT INTO api_tokens(name, scope, token_hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
		t.Name, t.Scope, t.TokenHash, t.CreatedAt.UnixMilli(), t.ExpiresAt.UnixMilli())
	if err != nil {
		if isUniqueViolation(err) {
			return 0, ErrTokenNameTaken
		}
		return 0, err
	}
	s.changed(TopicAPITokens)
	return id, nil
}

// ListAPITokens lists every token, oldest first.
func (s *Store) ListAPITokens(ctx context.Context) ([]APIToken, error) {
	rows, err := s.query(ctx, apiTokenSelect+" ORDER BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []APIToken{}
	for rows.Next() {
		t, err := scanAPIToken(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// APITokenByHash returns the token with that hash, or ErrNotFound.
func (s *Store) APITokenByHash(ctx context.Context, hash string) (APIToken, error) {
	return scanAPIToken(s.queryRow(ctx, apiTokenSelect+" WHERE token_hash = ?", hash))
}

// DeleteAPIToken revokes a token; ErrNotFound when there is none.
func (s *Store) DeleteAPIToken(ctx context.Context, id int64) (APIToken, error) {
	var t APIToken
	err := s.Tx(ctx, func(tx *Tx) error {
		var err error
		if t, err = scanAPIToken(tx.queryRow(ctx, apiTokenSelect+" WHERE id = ?", id)); err != nil {
			return err
		}
		_, err = tx.exec(ctx, "DELETE FROM api_tokens WHERE id = ?", id)
		return err
	})
	return t, s.announce(err, TopicAPITokens)
}

// DeleteAllAPITokens revokes every token (the password reset) and says
// how many it revoked.
func (s *Store) DeleteAllAPITokens(ctx context.Context) (int64, error) {
	res, err := s.exec(ctx, "DELETE FROM api_tokens")
	if err != nil {
		return 0, s.announce(err, TopicAPITokens)
	}
	n, err := res.RowsAffected()
	return n, s.announce(err, TopicAPITokens)
}

// TouchAPIToken records a use of token id at at from addr.
func (s *Store) TouchAPIToken(ctx context.Context, id int64, at time.Time, addr string) error {
	return s.announce(affectOne(s.exec(ctx, "UPDATE api_tokens SET last_used_at = ?, last_used_addr = ? WHERE id = ?", at.UnixMilli(), addr, id)), TopicAPITokens)
}
