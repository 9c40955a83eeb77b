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

// RateLimitedError says the client must wait: its address is locked out,
// the global failure budget is spent (Global), or too many checks are
// already running (Busy).
type RateLimitedError struct {
	RetryAfter int
	Global     bool
	Busy       bool
}

func (e *RateLimitedError) Error() string {
	unit := "seconds"
	if e.RetryAfter == 1 {
		unit = "second"
	}
	if e.Busy {
		return fmt.Sprintf("too many logins are being checked right now; try again later (in %d %s)", e.RetryAfter, unit)
	}
	return fmt.Sprintf("too many attempts; try again later (in %d %s)", e.RetryAfter, unit)
}

// Client describes who is asking.
type Client struct {
	Addr      netip.Addr
	Local     bool
	UserAgent string
	// Session is true when the request carries a live session: the global
	// failure budget does not lock such a client out.
	Session bool
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
	// Gate bounds argon2id work; nil means the process-wide one.
	Gate *Gate
	// Known remembers the clients that logged in before; their hashes go
	// ahead of the queue.
	Known KnownClients
}

func (s *Service) gate() *Gate {
	if s.Gate == nil {
		return defaultGate
	}
	return s.Gate
}

// ticket is c's place at the argon2id gate.
func (s *Service) ticket(c Client) Ticket { return clientTicket(c, &s.Known) }

// clientTicket is c's place at the argon2id gate: one run at a time per
// client key, ahead of the queue when known (may be nil) has seen it.
func clientTicket(c Client, known *KnownClients) Ticket {
	if !c.Addr.IsValid() {
		return Ticket{Priority: true}
	}
	k := LimitKey(c.Addr)
	return Ticket{Key: k, Keyed: true, Priority: known != nil && known.Has(k)}
}

// IDKey runs argon2id for client c through the daemon's one bound (see
// Gate.IDKey). Every argon2id use outside this package goes through it.
func (s *Service) IDKey(ctx context.Context, c Client, password, salt []byte, time, memory uint32, threads uint8, keyLen uint32) ([]byte, error) {
	return s.gate().IDKey(ctx, s.ticket(c), password, salt, time, memory, threads, keyLen)
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
		if setupCode == "" {
			return "", ErrSetupCodeRequired
		}
		// A code is a guess: it counts like a password.
		res, err := s.Reserve(ctx, c)
		if err != nil {
			return "", err
		}
		want, err := ReadSetupCode(s.DataDir)
		if err != nil || want == "" || !constantTimeEqual(setupCode, want) {
			s.Audit.Record(ctx, audit.Event{Kind: audit.SetupCodeFailed, Client: c.Addr, UserAgent: c.UserAgent})
			return "", ErrSetupCodeRequired
		}
		res.Release()
	}
	if err := CheckPassword(password); err != nil {
		return "", err
	}
	hash, err := hashPassword(ctx, s.gate(), s.ticket(c), password)
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
	s.Known.Add(LimitKey(c.Addr))
	return s.Sessions.Create(ctx, c.Addr.String(), c.UserAgent)
}

// Reserve takes one attempt for c in the rate limit before a credential is
// checked (see Limiter.Reserve): the attempt counts as a failure unless the
// caller releases it. A refusal is a *RateLimitedError, audited as one
// LOGIN_RATE_LIMITED (or, for the global budget, LOGIN_GLOBAL_LIMITED) row
// per address and minute.
func (s *Service) Reserve(ctx context.Context, c Client) (*Reservation, error) {
	// The global budget locks out clients without a session, except those
	// that logged in before from this address (Known): a flood from
	// elsewhere must not lock the operator out. Their own address's limit
	// still holds.
	res, err := s.Limiter.Reserve(c.Addr, !c.Session && !s.Known.Has(LimitKey(c.Addr)))
	if err != nil {
		kind := audit.LoginRateLimited
		var e *RateLimitedError
		if errors.As(err, &e) && e.Global {
			kind = audit.LoginGlobalLimited
		}
		s.Audit.RecordAggregated(ctx, audit.Event{Kind: kind, Client: c.Addr, UserAgent: c.UserAgent})
		return nil, err
	}
	return res, nil
}

// VerifyPassword checks password against the stored hash, counting a
// failure in the rate limit and auditing it under failKind.
func (s *Service) VerifyPassword(ctx context.Context, c Client, password, failKind string) error {
	res, err := s.Reserve(ctx, c)
	if err != nil {
		return err
	}
	hash, err := s.Store.GetSetting(ctx, passwordKey)
	if errors.Is(err, store.ErrNotFound) {
		res.Release()
		return ErrNotConfigured
	}
	if err != nil {
		res.Release()
		return err
	}
	ok, err := verifyPassword(ctx, s.gate(), s.ticket(c), hash, password)
	if err != nil {
		// Busy, or the client left: nothing was checked.
		res.Release()
		return err
	}
	if !ok {
		s.Audit.Record(ctx, audit.Event{Kind: failKind, Client: c.Addr, UserAgent: c.UserAgent})
		return ErrInvalidPassword
	}
	res.Release()
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
	if on, err := s.PasswordLogin(ctx); err != nil {
		return LoginResult{}, err
	} else if !on {
		return LoginResult{}, ErrPasswordLoginOff
	}
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
	s.LoginSucceeded(c)
	s.Audit.Record(ctx, audit.Event{Kind: audit.LoginSuccess, Client: c.Addr, UserAgent: c.UserAgent})
	token, err := s.Sessions.Create(ctx, c.Addr.String(), c.UserAgent)
	return LoginResult{SessionToken: token}, err
}

// LoginSucceeded forgets c's failures and remembers c as a known client.
func (s *Service) LoginSucceeded(c Client) {
	s.Limiter.Reset(c.Addr)
	if c.Addr.IsValid() {
		s.Known.Add(LimitKey(c.Addr))
	}
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

// Ended is what a recovery command ended: live sessions and API tokens.
type Ended struct {
	Sessions, Tokens int64
}

// ResetPassword replaces the password (root's recovery on the box), ends
// every session and revokes every API token: whoever held the old
// password may have left a session or a token behind. It says how many of
// each it ended, and so does the audit.
func (s *Service) ResetPassword(ctx context.Context, password string) (Ended, error) {
	var ended Ended
	if err := CheckPassword(password); err != nil {
		return ended, err
	}
	hash, err := hashPassword(ctx, s.gate(), Ticket{Priority: true}, password)
	if err != nil {
		return ended, err
	}
	if err := s.Store.SetSetting(ctx, passwordKey, hash); err != nil {
		return ended, err
	}
	// The way back in: a reset password signs in again even when the
	// operator had turned password sign-in off.
	if err := s.SetPasswordLogin(ctx, true); err != nil {
		return ended, err
	}
	if ended.Tokens, err = s.Store.DeleteAllAPITokens(ctx); err != nil {
		return ended, err
	}
	if ended.Sessions, err = s.Sessions.EndAll(ctx); err != nil {
		return ended, err
	}
	s.Audit.Record(ctx, audit.Event{Kind: audit.PasswordReset, Detail: fmt.Sprintf(
		"reset from the command line; password sign-in on; %s", ended)})
	return ended, nil
}

// String says what was ended, as the audit and the commands say it.
func (e Ended) String() string {
	return fmt.Sprintf("%d session(s) ended, %d API token(s) revoked", e.Sessions, e.Tokens)
}

// EndSessions ends every session after a recovery other than the
// password's (disable-2fa: whoever held a lost authenticator may hold a
// session too), audited under kind with why.
func (s *Service) EndSessions(ctx context.Context, kind, why string) (int64, error) {
	n, err := s.Sessions.EndAll(ctx)
	if err != nil {
		return 0, err
	}
	s.Audit.Record(ctx, audit.Event{Kind: kind, Detail: fmt.Sprintf("%s; %d session(s) ended", why, n)})
	return n, nil
}

// passwordLoginOffKey is set ("off") while password sign-in is turned off
// (single sign-on or a passkey signs in instead).
const passwordLoginOffKey = "password_login"

// PasswordLogin reports whether the password signs in (on unless turned off).
func (s *Service) PasswordLogin(ctx context.Context) (bool, error) {
	v, err := s.Store.GetSetting(ctx, passwordLoginOffKey)
	if errors.Is(err, store.ErrNotFound) {
		return true, nil
	}
	return v != "off", err
}

// SetPasswordLogin turns password sign-in on or off. The caller checks
// that another way in remains when it turns it off.
func (s *Service) SetPasswordLogin(ctx context.Context, on bool) error {
	if on {
		if err := s.Store.DeleteSetting(ctx, passwordLoginOffKey); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	}
	return s.Store.SetSetting(ctx, passwordLoginOffKey, "off")
}

// ErrPasswordLoginOff: the password does not sign in (the operator turned
// it off); the API says which ways in remain.
var ErrPasswordLoginOff = errors.New("password sign-in is off")
