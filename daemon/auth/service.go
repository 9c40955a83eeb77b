package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// The operator password hash lives under this settings key.
const passwordKey = "operator_password"

// Errors the API maps to statuses.
var (
	ErrAlreadyConfigured = errors.New("already configured")
	ErrInvalidPassword   = errors.New("invalid password")
	ErrNotConfigured     = errors.New("not configured: run setup first")
	ErrSetupCodeRequired = errors.New("setup from a remote address needs the one-time setup code in header X-Setup-Code: " +
		"run `tunnelsvc setup-code` on the server or read it from the daemon's log at its first start")
)

// RateLimitedError says the client address is locked out for a while.
type RateLimitedError struct{ RetryAfter int }

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("too many attempts; try again later (in %d seconds)", e.RetryAfter)
}

// Client describes who is asking.
type Client struct {
	Addr      netip.Addr
	Local     bool
	UserAgent string
}

// Service is the operator-credential logic behind the auth endpoints.
type Service struct {
	Store    *store.Store
	Sessions *Sessions
	Limiter  *Limiter
	Audit    *audit.Recorder
	Log      *slog.Logger
	DataDir  string
	Now      func() time.Time
	// SecondFactor is set by the composition root when 2FA is available.
	SecondFactor SecondFactor
}

// Configured reports whether a password has been set.
func (s *Service) Configured(ctx context.Context) (bool, error) {
	_, err := s.Store.GetSetting(ctx, passwordKey)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Setup sets the first password and starts a session. setupCode is the
// X-Setup-Code header, required when the client is not local.
func (s *Service) Setup(ctx context.Context, c Client, password, setupCode string) (token string, err error) {
	if ok, err := s.Configured(ctx); err != nil {
		return "", err
	} else if ok {
		return "", ErrAlreadyConfigured
	}
	if !c.Local {
		want, err := ReadSetupCode(s.DataDir)
		if err != nil || want == "" || !constantTimeEqual(setupCode, want) {
			if setupCode != "" {
				s.Limiter.Fail(c.Addr)
			}
			return "", ErrSetupCodeRequired
		}
	}
	if err := CheckPassword(password); err != nil {
		return "", err
	}
	hash, err := HashPassword(password)
	if err != nil {
		return "", err
	}
	won, err := s.Store.SetSettingIfAbsent(ctx, passwordKey, hash)
	if err != nil {
		return "", err
	}
	if !won {
		return "", ErrAlreadyConfigured
	}
	if err := RemoveSetupCode(s.DataDir); err != nil {
		s.Log.Warn("could not remove the used setup code", "err", err)
	}
	s.Audit.Record(ctx, audit.Event{Kind: audit.Setup, Client: c.Addr, UserAgent: c.UserAgent})
	return s.Sessions.Create(ctx, c.Addr.String(), c.UserAgent)
}

// CheckRate returns a *RateLimitedError when c is locked out, recording it.
func (s *Service) CheckRate(ctx context.Context, c Client) error {
	if ok, wait := s.Limiter.Check(c.Addr); !ok {
		s.Audit.Record(ctx, audit.Event{Kind: audit.LoginRateLimited, Client: c.Addr, UserAgent: c.UserAgent})
		return &RateLimitedError{RetryAfter: wait}
	}
	return nil
}

// VerifyPassword checks password against the stored hash, counting a
// failure in the rate limit and auditing it under failKind.
func (s *Service) VerifyPassword(ctx context.Context, c Client, password, failKind string) error {
	if err := s.CheckRate(ctx, c); err != nil {
		return err
	}
	hash, err := s.Store.GetSetting(ctx, passwordKey)
	if errors.Is(err, store.ErrNotFound) {
		return ErrNotConfigured
	}
	if err != nil {
		return err
	}
	ok, err := VerifyPassword(hash, password)
	if err != nil {
		return err
	}
	if !ok {
		s.Limiter.Fail(c.Addr)
		s.Audit.Record(ctx, audit.Event{Kind: failKind, Client: c.Addr, UserAgent: c.UserAgent})
		return ErrInvalidPassword
	}
	return nil
}

// SecondFactor is the two-factor provider consulted at login; nil means the
// daemon has none and every login is password-only.
type SecondFactor interface {
	// Enabled reports whether at least one device is enrolled.
	Enabled(ctx context.Context) (bool, error)
	// BeginPending issues the pending token of a half-done login.
	BeginPending(ctx context.Context, c Client) (string, error)
}

// LoginResult is either a session (2FA off) or a pending 2FA login.
type LoginResult struct {
	SessionToken string
	PendingToken string
}

// TOTPEnabled reports whether logins need a second factor.
func (s *Service) TOTPEnabled(ctx context.Context) (bool, error) {
	if s.SecondFactor == nil {
		return false, nil
	}
	return s.SecondFactor.Enabled(ctx)
}

// Login checks the password and starts a session, or, with 2FA on, a
// pending login that POST /api/auth/login/2fa completes.
func (s *Service) Login(ctx context.Context, c Client, password string) (LoginResult, error) {
	if err := s.VerifyPassword(ctx, c, password, audit.LoginFailed); err != nil {
		return LoginResult{}, err
	}
	twoFA, err := s.TOTPEnabled(ctx)
	if err != nil {
		return LoginResult{}, err
	}
	if twoFA {
		pending, err := s.SecondFactor.BeginPending(ctx, c)
		return LoginResult{PendingToken: pending}, err
	}
	s.Limiter.Reset(c.Addr)
	s.Audit.Record(ctx, audit.Event{Kind: audit.LoginSuccess, Client: c.Addr, UserAgent: c.UserAgent})
	token, err := s.Sessions.Create(ctx, c.Addr.String(), c.UserAgent)
	return LoginResult{SessionToken: token}, err
}

// Logout ends the session named by token (if any) and audits it.
func (s *Service) Logout(ctx context.Context, c Client, token string) error {
	if token != "" {
		if ok, _ := s.Sessions.Valid(ctx, token); ok {
			s.Audit.Record(ctx, audit.Event{Kind: audit.Logout, Client: c.Addr, UserAgent: c.UserAgent})
		}
	}
	return s.Sessions.End(ctx, token)
}

// ResetPassword replaces the password (root's recovery on the box) and ends
// every session.
func (s *Service) ResetPassword(ctx context.Context, password string) error {
	if err := CheckPassword(password); err != nil {
		return err
	}
	hash, err := HashPassword(password)
	if err != nil {
		return err
	}
	if err := s.Store.SetSetting(ctx, passwordKey, hash); err != nil {
		return err
	}
	if err := s.Sessions.EndAll(ctx); err != nil {
		return err
	}
	s.Audit.Record(ctx, audit.Event{Kind: audit.PasswordReset, Detail: "reset from the command line; all sessions ended"})
	return nil
}
