package machines

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Bypass tokens' lifetimes, in days.
const (
	DefaultBypassDays = 90
	MaxBypassDays     = 730
)

// BypassToken is a bypass token as the API shows it; Token, the secret,
// only in the answer that made it.
type BypassToken struct {
	ID        int64     `json:"id"`
	TunnelID  int64     `json:"tunnel_id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Expired   bool      `json:"expired"`
	Token     string    `json:"token,omitempty"`
}

// BypassTokenInput is POST /api/tunnels/{id}/bypass-tokens's body.
type BypassTokenInput struct {
	Name          *string `json:"name"`
	ExpiresInDays *int    `json:"expires_in_days"`
}

func (s *Service) bypassView(b store.BypassToken) BypassToken {
	return BypassToken{ID: b.ID, TunnelID: b.TunnelID, Name: b.Name, CreatedAt: b.CreatedAt, ExpiresAt: b.ExpiresAt,
		Expired: !s.now().Before(b.ExpiresAt)}
}

// httpTunnel is tunnel id, which must be an http tunnel.
func (s *Service) httpTunnel(ctx context.Context, id int64) (store.Tunnel, error) {
	t, err := s.Store.GetTunnel(ctx, id)
	if err != nil {
		return t, err
	}
	if t.Kind != "http" {
		return t, InputError(fmt.Sprintf("tunnel %q is a %s tunnel: bypass tokens and visitor sessions are for http tunnels", t.Name, t.Kind))
	}
	return t, nil
}

// CreateBypassToken makes a token for an http tunnel and returns it with
// its secret, which is kept only as a hash. The gate takes it at once.
func (s *Service) CreateBypassToken(ctx context.Context, tunnelID int64, in BypassTokenInput) (BypassToken, error) {
	t, err := s.httpTunnel(ctx, tunnelID)
	if err != nil {
		return BypassToken{}, err
	}
	name := ""
	if in.Name != nil {
		name = strings.TrimSpace(*in.Name)
	}
	if err := checkTokenName(name); err != nil {
		return BypassToken{}, err
	}
	days := DefaultBypassDays
	if in.ExpiresInDays != nil {
		days = *in.ExpiresInDays
	}
	if days < 1 || days > MaxBypassDays {
		return BypassToken{}, InputError(fmt.Sprintf("expires_in_days must be between 1 and %d", MaxBypassDays))
	}
	raw, err := auth.NewToken()
	if err != nil {
		return BypassToken{}, err
	}
	secret := gate.TokenPrefix + raw
	now := s.now()
	b, err := s.Store.InsertBypassToken(ctx, store.BypassToken{TunnelID: t.ID, Name: name, Hash: auth.HashToken(secret),
		CreatedAt: now, ExpiresAt: now.Add(time.Duration(days) * 24 * time.Hour)})
	var taken *store.ConflictError
	if errors.As(err, &taken) {
		return BypassToken{}, ConflictError(fmt.Sprintf("tunnel %q already has a bypass token named %q", t.Name, name))
	}
	if err != nil {
		return BypassToken{}, err
	}
	s.changed(t.MachineID)
	out := s.bypassView(b)
	out.Token = secret
	return out, nil
}

// checkTokenName: 1 to 64 letters, digits, '.', '_' or '-' (it is shown
// in the audit log and the app's X-Forwarded-User).
func checkTokenName(name string) error {
	if name == "" || len(name) > 64 || strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}) >= 0 {
		return InputError("name must be 1 to 64 letters, digits, '.', '_' or '-'")
	}
	return nil
}

// BypassTokens lists an http tunnel's tokens, without their secrets.
func (s *Service) BypassTokens(ctx context.Context, tunnelID int64) ([]BypassToken, error) {
	if _, err := s.httpTunnel(ctx, tunnelID); err != nil {
		return nil, err
	}
	list, err := s.Store.BypassTokens(ctx, tunnelID)
	if err != nil {
		return nil, err
	}
	out := make([]BypassToken, 0, len(list))
	for _, b := range list {
		out = append(out, s.bypassView(b))
	}
	return out, nil
}

// RevokeBypassToken deletes a token; the gate refuses it from the answer
// on.
func (s *Service) RevokeBypassToken(ctx context.Context, tunnelID, tokenID int64) (BypassToken, error) {
	t, err := s.httpTunnel(ctx, tunnelID)
	if err != nil {
		return BypassToken{}, err
	}
	b, err := s.Store.DeleteBypassToken(ctx, tunnelID, tokenID)
	if err != nil {
		return BypassToken{}, err
	}
	s.changed(t.MachineID)
	return s.bypassView(b), nil
}

// EndVisitorSessions signs every visitor of an http tunnel's gate out,
// remembered devices included, on every edge.
func (s *Service) EndVisitorSessions(ctx context.Context, tunnelID int64) (store.Tunnel, error) {
	t, err := s.httpTunnel(ctx, tunnelID)
	if err != nil {
		return t, err
	}
	if err := s.Store.EndVisitorSessions(ctx, tunnelID); err != nil {
		return t, err
	}
	s.changed(t.MachineID)
	return t, nil
}
