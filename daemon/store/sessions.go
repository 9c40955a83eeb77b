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
}

// CreateSession stores a session.
func (s *Store) CreateSession(ctx context.Context, sess Session) error {
	_, err := s.exec(ctx,
		"INSERT INTO sessions(token_hash, created_at, expires_at, client_addr, user_agent) VALUES (?, ?, ?, ?, ?)",
		sess.TokenHash, sess.CreatedAt.Unix(), sess.ExpiresAt.Unix(), sess.ClientAddr, sess.UserAgent)
	return err
}

// GetSession returns the session with the given token hash, or ErrNotFound.
func (s *Store) GetSession(ctx context.Context, tokenHash string) (Session, error) {
	var sess Session
	var created, expires int64
	err := s.db.QueryRowContext(ctx,
		"SELECT token_hash, created_at, expires_at, client_addr, user_agent FROM sessions WHERE token_hash = ?", tokenHash).
		Scan(&sess.TokenHash, &created, &expires, &sess.ClientAddr, &sess.UserAgent)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, ErrNotFound
	}
	sess.CreatedAt, sess.ExpiresAt = time.Unix(created, 0), time.Unix(expires, 0)
	return sess, err
}

// DeleteSession ends one session.
func (s *Store) DeleteSession(ctx context.Context, tokenHash string) error {
	_, err := s.exec(ctx, "DELETE FROM sessions WHERE token_hash = ?", tokenHash)
	return err
}

// DeleteAllSessions ends every session (password reset).
func (s *Store) DeleteAllSessions(ctx context.Context) error {
	_, err := s.exec(ctx, "DELETE FROM sessions")
	return err
}

// DeleteExpiredSessions removes sessions that expired before now.
func (s *Store) DeleteExpiredSessions(ctx context.Context, now time.Time) error {
	_, err := s.exec(ctx, "DELETE FROM sessions WHERE expires_at <= ?", now.Unix())
	return err
}
