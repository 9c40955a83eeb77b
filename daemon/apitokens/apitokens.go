// Package apitokens keeps the operator's long-lived API tokens: a name, a
// scope ("read": GET only; "write": every route a token may use) and an
// expiry, the secret shown once and stored only as its hash.
package apitokens

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Prefix starts every token, so that a leaked one is recognisable (secret
// scanners, logs) and cannot be taken for a session or an agent token.
const Prefix = "tsvc_"

// Scopes.
const (
	ScopeRead  = "read"
	ScopeWrite = "write"
)

// Expiry bounds, in days; DefaultDays when the request gives none.
const (
	DefaultDays = 30
	MaxDays     = 365
)

// TouchEvery is how often a token's last use is written: every use would
// be a commit per API call.
const TouchEvery = time.Minute

// Token is a token as the API shows it (never its secret).
type Token struct {
	ID           int64      `json:"id"`
	Name         string     `json:"name"`
	Scope        string     `json:"scope"`
	CreatedAt    time.Time  `json:"created_at"`
	ExpiresAt    time.Time  `json:"expires_at"`
	LastUsedAt   *time.Time `json:"last_used_at"`
	LastUsedAddr string     `json:"last_used_addr"`
	Expired      bool       `json:"expired"`
}

// Created is POST /api/tokens's answer: the token, and its secret once.
type Created struct {
	Token
	Secret string `json:"token"`
}

// InputError is a request the caller must change.
type InputError string

func (e InputError) Error() string { return string(e) }

// ErrInvalid is a bearer token no token matches (or an expired one).
var ErrInvalid = errors.New("invalid API token")

// Service manages the tokens.
type Service struct {
	Store *store.Store
	Now   func() time.Time

	mu      sync.Mutex
	touched map[int64]time.Time
}

func (s *Service) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

func view(t store.APIToken, now time.Time) Token {
	v := Token{ID: t.ID, Name: t.Name, Scope: t.Scope, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt,
		LastUsedAddr: t.LastUsedAddr, Expired: !now.Before(t.ExpiresAt)}
	if !t.LastUsedAt.IsZero() {
		at := t.LastUsedAt
		v.LastUsedAt = &at
	}
	return v
}

// Create makes a token; days 0 is DefaultDays.
func (s *Service) Create(ctx context.Context, name, scope string, days int) (Created, error) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return Created{}, InputError("name required")
	case utf8.RuneCountInString(name) > 64 || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return Created{}, InputError("name must be 1-64 printable characters")
	case scope != ScopeRead && scope != ScopeWrite:
		return Created{}, InputError(`scope must be "read" or "write"`)
	case days < 0 || days > MaxDays:
		return Created{}, InputError(fmt.Sprintf("expires_in_days must be between 1 and %d", MaxDays))
	}
	if days == 0 {
		days = DefaultDays
	}
	raw, err := auth.NewToken()
	if err != nil {
		return Created{}, err
	}
	secret := Prefix + raw
	now := s.now().UTC()
	t := store.APIToken{Name: name, Scope: scope, TokenHash: auth.HashToken(secret), CreatedAt: now, ExpiresAt: now.AddDate(0, 0, days)}
	if t.ID, err = s.Store.InsertAPIToken(ctx, t); err != nil {
		if errors.Is(err, store.ErrTokenNameTaken) {
			return Created{}, InputError(fmt.Sprintf("an API token named %q exists: choose another name, or revoke it first", name))
		}
		return Created{}, err
	}
	return Created{Token: view(t, now), Secret: secret}, nil
}

// List lists the tokens, oldest first.
func (s *Service) List(ctx context.Context) ([]Token, error) {
	ts, err := s.Store.ListAPITokens(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]Token, len(ts))
	for i, t := range ts {
		out[i] = view(t, now)
	}
	return out, nil
}

// Revoke deletes a token: the next request with it is refused.
func (s *Service) Revoke(ctx context.Context, id int64) (Token, error) {
	t, err := s.Store.DeleteAPIToken(ctx, id)
	if err != nil {
		return Token{}, err
	}
	s.mu.Lock()
	delete(s.touched, id)
	s.mu.Unlock()
	return view(t, s.now()), nil
}

// Check returns the token whose secret this is, unexpired, and records
// its use from addr (at most every TouchEvery); ErrInvalid otherwise.
func (s *Service) Check(ctx context.Context, secret, addr string) (Token, error) {
	if !strings.HasPrefix(secret, Prefix) {
		return Token{}, ErrInvalid
	}
	t, err := s.Store.APITokenByHash(ctx, auth.HashToken(secret))
	if errors.Is(err, store.ErrNotFound) {
		return Token{}, ErrInvalid
	}
	if err != nil {
		return Token{}, err
	}
	now := s.now()
	if !now.Before(t.ExpiresAt) {
		return Token{}, ErrInvalid
	}
	s.mu.Lock()
	last := s.touched[t.ID]
	due := now.Sub(last) >= TouchEvery || t.LastUsedAddr != addr
	if due {
		if s.touched == nil {
			s.touched = map[int64]time.Time{}
		}
		s.touched[t.ID] = now
	}
	s.mu.Unlock()
	if due {
		// A failed write does not refuse the request: the use is
		// recorded at the next one.
		if err := s.Store.TouchAPIToken(ctx, t.ID, now, addr); err == nil {
			t.LastUsedAt, t.LastUsedAddr = now, addr
		}
	}
	return view(t, now), nil
}
