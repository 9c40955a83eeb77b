package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// SessionTTL is the lifetime of a dashboard session (spec §5, §8).
const SessionTTL = 86400 * time.Second

// RecentAuthWindow is how long after its login or its latest step-up a
// session may make sensitive changes ("sudo mode").
const RecentAuthWindow = 10 * time.Minute

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
//
// Every API request checks its session, so a session found live is
// remembered instead of being read from the database each time. The memory
// is dropped whenever the database was written to (store.Changes: by this
// process, or by `tunnelsvc reset-password` from another one) and when this
// process ends a session; expiry is checked on every use, and an entry is
// read again after SessionCacheTTL in any case. Unknown tokens are never
// remembered.
type Sessions struct {
	Store *store.Store
	Now   func() time.Time

	mu    sync.Mutex
	cache map[string]cachedSession // by token hash
	// changes is the store's change count the cache was filled under;
	// ended counts End and EndAll calls. A check that read the database
	// under other values must not remember what it read.
	changes, ended uint64
}

// SessionCacheTTL bounds how long a session found live is trusted without
// reading it again, whatever else happens.
const SessionCacheTTL = 5 * time.Second

// sessionCacheMax bounds the cache; when full it starts over.
const sessionCacheMax = 1024

type cachedSession struct {
	expires, checked time.Time
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
		ClientAddr: clientAddr, UserAgent: userAgent, AuthenticatedAt: now,
	})
	return token, err
}

// Valid reports whether token names a live session.
func (s *Sessions) Valid(ctx context.Context, token string) (bool, error) {
	if token == "" {
		return false, nil
	}
	hash := HashToken(token)
	now := s.Now()
	changes := s.Store.Changes()
	s.mu.Lock()
	if changes != s.changes {
		s.cache, s.changes = nil, changes
	}
	c, hit := s.cache[hash]
	ended := s.ended
	s.mu.Unlock()
	if hit && !now.Before(c.checked) && now.Sub(c.checked) < SessionCacheTTL {
		return now.Before(c.expires), nil
	}
	sess, err := s.Store.GetSession(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	live := now.Before(sess.ExpiresAt)
	s.mu.Lock()
	if live && s.changes == changes && s.ended == ended {
		if s.cache == nil || len(s.cache) >= sessionCacheMax {
			s.cache = make(map[string]cachedSession)
		}
		s.cache[hash] = cachedSession{expires: sess.ExpiresAt, checked: now}
	}
	s.mu.Unlock()
	return live, nil
}

// RecentUntil is when the live session named by token stops counting as
// recently authenticated (its login or latest step-up plus
// RecentAuthWindow); ok is false when no live session has that token. It
// reads the database every time: only sensitive changes ask.
func (s *Sessions) RecentUntil(ctx context.Context, token string) (until time.Time, ok bool, err error) {
	if token == "" {
		return time.Time{}, false, nil
	}
	sess, err := s.Store.GetSession(ctx, HashToken(token))
	if errors.Is(err, store.ErrNotFound) {
		return time.Time{}, false, nil
	}
	if err != nil || !s.Now().Before(sess.ExpiresAt) {
		return time.Time{}, false, err
	}
	return sess.AuthenticatedAt.Add(RecentAuthWindow), true, nil
}

// Recent reports whether the session named by token logged in or passed a
// step-up within RecentAuthWindow.
func (s *Sessions) Recent(ctx context.Context, token string) (bool, error) {
	until, ok, err := s.RecentUntil(ctx, token)
	return ok && s.Now().Before(until), err
}

// MarkAuthenticated records that the session named by token has just
// proved the password or a code again (a step-up).
func (s *Sessions) MarkAuthenticated(ctx context.Context, token string) error {
	return s.Store.SetSessionAuthenticated(ctx, HashToken(token), s.Now())
}

// forget drops the cache after this process ended sessions (the store's
// change count would say so too; this does not depend on it).
func (s *Sessions) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache = nil
	s.ended++
}

// End ends the session named by token, if any.
func (s *Sessions) End(ctx context.Context, token string) error {
	if token == "" {
		return nil
	}
	err := s.Store.DeleteSession(ctx, HashToken(token))
	s.forget()
	return err
}

// EndAll ends every session (the recovery commands) and says how many
// live ones it ended.
func (s *Sessions) EndAll(ctx context.Context) (int64, error) {
	n, err := s.Store.DeleteAllSessions(ctx, s.Now())
	s.forget()
	return n, err
}
