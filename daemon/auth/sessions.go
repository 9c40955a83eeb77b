package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// SessionTTL is the lifetime of a dashboard session (spec §5, §8).
const SessionTTL = 86400 * time.Second

// NewToken returns 32 random bytes, base64url-encoded.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// HashToken is how tokens are stored: SHA-256, hex. Tokens carry 256 bits of
// randomness, so a fast hash is enough.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Sessions creates, checks and ends dashboard sessions.
type Sessions struct {
	Store *store.Store
	Now   func() time.Time
}

// Create starts a session and returns its token.
func (s *Sessions) Create(ctx context.Context, clientAddr, userAgent string) (string, error) {
	token, err := NewToken()
	if err != nil {
		return "", err
	}
	now := s.Now()
	if err := s.Store.DeleteExpiredSessions(ctx, now); err != nil {
		return "", err
	}
	err = s.Store.CreateSession(ctx, store.Session{
		TokenHash: HashToken(token), CreatedAt: now, ExpiresAt: now.Add(SessionTTL),
		ClientAddr: clientAddr, UserAgent: userAgent,
	})
	return token, err
}

// Valid reports whether token names a live session.
func (s *Sessions) Valid(ctx context.Context, token string) (bool, error) {
	if token == "" {
		return false, nil
	}
	sess, err := s.Store.GetSession(ctx, HashToken(token))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return s.Now().Before(sess.ExpiresAt), nil
}

// End ends the session named by token, if any.
func (s *Sessions) End(ctx context.Context, token string) error {
	if token == "" {
		return nil
	}
	return s.Store.DeleteSession(ctx, HashToken(token))
}
