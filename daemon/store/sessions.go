package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// Session is a stored dashboard session (the token itself is never stored).
type Session struct {
	TokenHash  string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	ClientAddr string
	UserAgent  string
	// AuthenticatedAt is when the session last proved a password or code:
	// its login, or its latest step-up (CreatedAt when never stepped up).
	AuthenticatedAt time.Time
}

// CreateSession stores a session.
func (s *Store) CreateSession(ctx context.Context, sess Session) error {
	if sess.AuthenticatedAt.IsZero() {
		sess.AuthenticatedAt = sess.CreatedAt
	}
	_, err := s.exec(ctx,
		"INSERT INTO sessions(token_hash, created_at, expires_at, client_addr, user_agent, authenticated_at) VALUES (?, ?, ?, ?, ?, ?)",
		sess.TokenHash, sess.CreatedAt.Unix(), sess.ExpiresAt.Unix(), sess.ClientAddr, sess.UserAgent, sess.AuthenticatedAt.Unix())
	return err
}

// GetSession returns the session with the given token hash, or ErrNotFound.
func (s *Store) GetSession(ctx context.Context, tokenHash string) (Session, error) {
	var sess Session
	var created, expires, authenticated int64
	err := s.queryRow(ctx,
		"SELECT token_hash, created_at, expires_at, client_addr, user_agent, authenticated_at FROM sessions WHERE token_hash = ?", tokenHash).
		Scan(&sess.TokenHash, &created, &expires, &sess.ClientAddr, &sess.UserAgent, &authenticated)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, ErrNotFound
	}
	if authenticated < created {
		authenticated = created
	}
	sess.CreatedAt, sess.ExpiresAt, sess.AuthenticatedAt = time.Unix(created, 0), time.Unix(expires, 0), time.Unix(authenticated, 0)
	return sess, err
}

// SetSessionAuthenticated records that the session proved a password or
// code at t (a step-up); ErrNotFound when it has ended.
func (s *Store) SetSessionAuthenticated(ctx context.Context, tokenHash string, t time.Time) error {
	return affectOne(s.exec(ctx, "UPDATE sessions SET authenticated_at = ? WHERE token_hash = ?", t.Unix(), tokenHash))
}

// DeleteSession ends one session.
func (s *Store) DeleteSession(ctx context.Context, tokenHash string) error {
	_, err := s.exec(ctx, "DELETE FROM sessions WHERE token_hash = ?", tokenHash)
	return err
}

// DeleteAllSessions ends every session (the recovery commands) and says
// how many live ones it ended.
func (s *Store) DeleteAllSessions(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	err := s.Tx(ctx, func(tx *Tx) error {
		if err := tx.queryRow(ctx, "SELECT COUNT(*) FROM sessions WHERE expires_at > ?", now.Unix()).Scan(&n); err != nil {
			return err
		}
		_, err := tx.exec(ctx, "DELETE FROM sessions")
		return err
	})
	return n, err
}

// DeleteExpiredSessions removes sessions that expired before now.
func (s *Store) DeleteExpiredSessions(ctx context.Context, now time.Time) error {
	_, err := s.exec(ctx, "DELETE FROM sessions WHERE expires_at <= ?", now.Unix())
	return err
}
