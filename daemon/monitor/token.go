package monitor

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// tokenKey is the settings key of the /metrics bearer token's hash.
const tokenKey = "metrics_token"

// Tokens keeps the one bearer token that may scrape /metrics. Only its
// SHA-256 is stored; the token is shown once, when it is created.
type Tokens struct {
	Store *store.Store
	Now   func() time.Time
}

type storedToken struct {
	Hash      string    `json:"hash"`
	CreatedAt time.Time `json:"created_at"`
}

// TokenStatus says whether a token exists and since when.
type TokenStatus struct {
	Exists    bool       `json:"exists"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
}

func (t *Tokens) load(ctx context.Context) (*storedToken, error) {
	v, err := t.Store.GetSetting(ctx, tokenKey)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st storedToken
	if err := json.Unmarshal([]byte(v), &st); err != nil || st.Hash == "" {
		return nil, errors.New("stored metrics token is unreadable")
	}
	return &st, nil
}

// Status reports the current token, without it.
func (t *Tokens) Status(ctx context.Context) (TokenStatus, error) {
	st, err := t.load(ctx)
	if err != nil || st == nil {
		return TokenStatus{}, err
	}
	c := st.CreatedAt
	return TokenStatus{Exists: true, CreatedAt: &c}, nil
}

// Create makes a new token, replacing any previous one, and returns it.
func (t *Tokens) Create(ctx context.Context) (string, TokenStatus, error) {
	tok, err := auth.NewToken()
	if err != nil {
		return "", TokenStatus{}, err
	}
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	st := storedToken{Hash: auth.HashToken(tok), CreatedAt: now().UTC().Truncate(time.Second)}
	b, _ := json.Marshal(st)
	if err := t.Store.SetSetting(ctx, tokenKey, string(b)); err != nil {
		return "", TokenStatus{}, err
	}
	return tok, TokenStatus{Exists: true, CreatedAt: &st.CreatedAt}, nil
}

// Revoke deletes the token; scrapes answer 401 from then on.
func (t *Tokens) Revoke(ctx context.Context) error {
	return t.Store.DeleteSetting(ctx, tokenKey)
}

// Valid reports whether tok is the current token.
func (t *Tokens) Valid(ctx context.Context, tok string) (bool, error) {
	if tok == "" {
		return false, nil
	}
	st, err := t.load(ctx)
	if err != nil || st == nil {
		return false, err
	}
	return subtle.ConstantTimeCompare([]byte(auth.HashToken(tok)), []byte(st.Hash)) == 1, nil
}
