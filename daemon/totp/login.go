package totp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
)

// BeginPending issues the pending token of a login whose password was
// right; POST /api/auth/login/2fa completes it within PendingTTL.
func (s *Service) BeginPending(ctx context.Context, c auth.Client) (string, error) {
	token, err := auth.NewToken()
	if err != nil {
		return "", err
	}
	now := s.now()
	if err := s.st.CreateLoginPending(ctx, auth.HashToken(token), c.Addr.String(), now, now.Add(PendingTTL)); err != nil {
		return "", err
	}
	s.record(ctx, c, KindLoginPending, "")
	return token, nil
}

// CompleteLogin finishes a pending login with a TOTP code of any device or
// a backup code and returns the new session's token. The pending login is
// bound to the address that started it and takes PendingAttempts codes;
// every attempt is reserved in the shared rate limit before it is checked.
func (s *Service) CompleteLogin(ctx context.Context, c auth.Client, pendingToken, code string) (string, error) {
	if pendingToken == "" || strings.TrimSpace(code) == "" {
		return "", ErrPendingCodeRequired
	}
	res, hash, err := s.takeAttempt(ctx, c, pendingToken)
	if err != nil {
		return "", err
	}
	m, err := s.find(ctx, c, code, true)
	if err == nil {
		err = s.use(ctx, m)
	}
	return s.settleAttempt(ctx, c, res, hash, err, "2FA login", func() {
		detail := ""
		if m.isBackup() {
			s.record(ctx, c, KindBackupCodeUsed, "2FA login")
			detail = "backup code"
		} else {
			detail = fmt.Sprintf("device %q (%s)", m.device.Name, m.device.ID)
		}
		s.record(ctx, c, KindLoginSuccess, detail)
	})
}

// settleAttempt ends an attempt of a pending login once its second factor
// was checked (err): a refusal (an *Error) is audited as failWhat and ends
// the login at its last attempt; any other error means nothing was
// checked, and the attempt is given back; success consumes the pending
// login, records it (succeeded) and returns the new session's token.
func (s *Service) settleAttempt(ctx context.Context, c auth.Client, res *auth.Reservation, hash string, err error, failWhat string, succeeded func()) (string, error) {
	var e *Error
	if errors.As(err, &e) {
		s.spent(ctx, hash)
		return "", s.fail(ctx, c, KindLoginFailed, failWhat, err)
	}
	if err != nil {
		// Busy, or the client left: the attempt did not happen.
		res.Release()
		if rerr := s.st.ReleaseLoginPendingAttempt(ctx, hash); rerr != nil {
			s.log.Error("could not give back a pending login attempt", "err", rerr)
		}
		return "", err
	}
	if ok, err := s.st.ConsumeLoginPending(ctx, hash, s.now()); err != nil {
		res.Release()
		return "", err
	} else if !ok {
		return "", s.fail(ctx, c, KindLoginFailed, "2FA login", ErrPendingInvalid)
	}
	res.Release()
	s.auth.LoginSucceeded(c)
	succeeded()
	return s.auth.Sessions.Create(ctx, c.Addr.String(), c.UserAgent)
}

// takeAttempt reserves one attempt of c in the shared rate limit and one
// of the live pending login pendingToken's, which must have been started
// from c's address (a login started elsewhere is ended). It returns the
// reservation (release it when nothing was checked, or on success) and
// the pending login's hash.
func (s *Service) takeAttempt(ctx context.Context, c auth.Client, pendingToken string) (*auth.Reservation, string, error) {
	res, err := s.auth.Reserve(ctx, c)
	if err != nil {
		return nil, "", err
	}
	hash := auth.HashToken(pendingToken)
	from, ok, err := s.st.ReserveLoginPendingAttempt(ctx, hash, s.now(), PendingAttempts)
	if err != nil {
		res.Release()
		return nil, "", err
	}
	if !ok {
		return nil, "", s.fail(ctx, c, KindLoginFailed, "2FA login", ErrPendingInvalid)
	}
	if from != c.Addr.String() {
		s.spent(ctx, hash)
		return nil, "", s.fail(ctx, c, KindLoginFailed, "2FA login from "+c.Addr.String()+" of a login started from "+from, ErrPendingOtherAddr)
	}
	return res, hash, nil
}

// spent ends the pending login hash once its last attempt is taken.
func (s *Service) spent(ctx context.Context, hash string) {
	if err := s.st.DeleteSpentLoginPending(ctx, hash, PendingAttempts); err != nil {
		s.log.Error("could not end a spent pending login", "err", err)
	}
}

// Requirement names what a step-up needs: "totp" or "password".
func (s *Service) Requirement(ctx context.Context) (string, error) {
	on, err := s.Enabled(ctx)
	if on {
		return "totp", err
	}
	return "password", err
}

// Challenge is the step-up body: a TOTP code when 2FA is on, otherwise the
// password (spec §5.5).
type Challenge struct {
	Password string `json:"password"`
	Code     string `json:"code"`
	// Ceremony and Passkey answer a passkey prompt instead of a code
	// (BeginPasskeyAssertion, for a step-up); RP is the relying party the
	// API derived from the request.
	Ceremony string          `json:"ceremony"`
	Passkey  json.RawMessage `json:"passkey"`
	RP       RP              `json:"-"`
}

// StepUp checks a fresh challenge before a sensitive action (action says
// which, for the audit log). With 2FA on only a device's TOTP code will do,
// not a backup code; otherwise the login password. Failures are audited as
// STEP_UP_FAILED and count in the rate limit. Missing the needed field is
// ErrCodeRequired or ErrPasswordRequired; a wrong one is ErrInvalidCode,
// ErrCodeReused or auth.ErrInvalidPassword.
func (s *Service) StepUp(ctx context.Context, c auth.Client, ch Challenge, action string) error {
	on, err := s.Enabled(ctx)
	if err != nil {
		return err
	}
	if !on {
		if ch.Password == "" {
			return ErrPasswordRequired
		}
		err := s.auth.VerifyPassword(ctx, c, ch.Password, KindStepUpFailed)
		if errors.Is(err, auth.ErrInvalidPassword) {
			// VerifyPassword audited the failure without saying what for.
			s.log.Info("step-up failed", "action", action, "client", c.Addr)
		}
		return err
	}
	if len(ch.Passkey) > 0 {
		return s.StepUpWithPasskey(ctx, c, ch.RP, ch.Ceremony, ch.Passkey, action)
	}
	if strings.TrimSpace(ch.Code) == "" {
		return ErrCodeRequired
	}
	res, err := s.auth.Reserve(ctx, c)
	if err != nil {
		return err
	}
	m, err := s.find(ctx, c, ch.Code, false)
	if err == nil {
		err = s.use(ctx, m)
	}
	var e *Error
	if errors.As(err, &e) {
		return s.fail(ctx, c, KindStepUpFailed, action, err)
	}
	res.Release()
	return err
}
