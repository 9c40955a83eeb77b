// Package totp is the second factor: TOTP devices (RFC 6238, 30 s, 6
// digits, SHA-1, one step of tolerance each way, replay guard per device),
// single-use backup codes, the pending login that a code completes, and the
// step-up check that guards sensitive downloads.
package totp

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Audit event kinds of this package.
const (
	KindLoginPending      = "LOGIN_2FA_PENDING"
	KindLoginSuccess      = "LOGIN_2FA_SUCCESS"
	KindLoginFailed       = "LOGIN_2FA_FAILED"
	KindBackupCodeUsed    = "BACKUP_CODE_USED"
	KindEnabled           = "TOTP_ENABLED"
	KindDisabled          = "TOTP_DISABLED"
	KindDeviceAdded       = "TOTP_DEVICE_ADDED"
	KindDeviceRemoved     = "TOTP_DEVICE_REMOVED"
	KindBackupRegenerated = "BACKUP_CODES_REGENERATED"
	KindStepUpFailed      = "STEP_UP_FAILED"
)

func init() {
	// Failed second factors are authentication failures: the ban tool sees
	// them in the same "auth failure from" line as wrong passwords.
	audit.RegisterFailureKind(KindLoginFailed)
	audit.RegisterFailureKind(KindStepUpFailed)
}

// Lifetimes (spec §5.10 leaves them to us).
const (
	EnrollmentTTL = 10 * time.Minute
	PendingTTL    = 5 * time.Minute
	// PendingAttempts is how many codes a pending login takes: it dies at
	// the last wrong one.
	PendingAttempts = 5
)

// Issuer is the otpauth issuer shown in authenticator apps.
const Issuer = "tunnelsvc"

// Error is a failure the operator caused and can fix; its text is what the
// API answers.
type Error struct{ msg string }

func (e *Error) Error() string { return e.msg }

// The operator-facing failures. The API maps ErrDeviceNotFound to 404,
// verification failures at login and step-up to 401, the rest to 400.
var (
	ErrCodeRequired        = &Error{"code is required"}
	ErrPasswordRequired    = &Error{"password is required"}
	ErrPendingCodeRequired = &Error{"pending_token and code are required"}
	ErrDeviceIDRequired    = &Error{"device id is required"}
	ErrDeviceNotFound      = &Error{"device not found"}
	ErrInvalidCode         = &Error{"invalid code"}
	ErrCodeReused          = &Error{"this code was already used; wait for the next one"}
	ErrNotEnabled          = &Error{"2FA is not enabled"}
	ErrNoEnrollment        = &Error{"no pending enrollment (it expires after 10 minutes): start again with enroll"}
	ErrOwnDevice           = &Error{"this code comes from the device being removed: use a code from another device or a backup code"}
	ErrPendingInvalid      = &Error{"the login has expired or is not valid: log in with the password again"}
	ErrPendingOtherAddr    = &Error{"this login was started from another address: log in with the password again"}
	ErrNameTooLong         = &Error{"name must be at most 64 characters"}
	ErrNameControl         = &Error{"name must not contain control characters"}
)

// IsVerification reports whether err is a failed code or token check (as
// opposed to a missing field), which login and step-up answer with 401.
func IsVerification(err error) bool {
	return errors.Is(err, ErrInvalidCode) || errors.Is(err, ErrCodeReused) || errors.Is(err, ErrPendingInvalid) ||
		errors.Is(err, ErrPendingOtherAddr) || errors.Is(err, ErrPasskeyRefused) || errors.Is(err, ErrCeremonyExpired)
}

// Options are the Service's dependencies; Log and Now default when nil.
type Options struct {
	Store  *store.Store
	Sealer *seal.Sealer
	// Auth supplies the shared rate limit, sessions and password check.
	Auth  *auth.Service
	Audit *audit.Recorder
	Log   *slog.Logger
	Now   func() time.Time
}

// Service implements the second factor. It satisfies auth.SecondFactor.
type Service struct {
	st     *store.Store
	sealer *seal.Sealer
	auth   *auth.Service
	audit  *audit.Recorder
	log    *slog.Logger
	now    func() time.Time
}

var _ auth.SecondFactor = (*Service)(nil)

// New returns a Service.
func New(o Options) *Service {
	s := &Service{st: o.Store, sealer: o.Sealer, auth: o.Auth, audit: o.Audit, log: o.Log, now: o.Now}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// Enabled reports whether at least one device is enrolled.
func (s *Service) Enabled(ctx context.Context) (bool, error) {
	n, err := s.st.CountSecondFactors(ctx)
	return n > 0, err
}

// Device is a device as the status endpoint shows it.
type Device struct {
	ID string `json:"id"`
	// Type is "totp" (an authenticator app) or "passkey" (WebAuthn).
	Type       string     `json:"type"`
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

// Status is spec §2 "2FA status".
type Status struct {
	Enabled              bool     `json:"enabled"`
	Devices              []Device `json:"devices"`
	BackupCodesRemaining int      `json:"backup_codes_remaining"`
}

// Status returns whether 2FA is on, the devices and the unused backup codes.
func (s *Service) Status(ctx context.Context) (Status, error) {
	ds, err := s.st.ListTOTPDevices(ctx)
	if err != nil {
		return Status{}, err
	}
	n, err := s.st.CountBackupCodes(ctx)
	if err != nil {
		return Status{}, err
	}
	ps, err := s.st.ListPasskeys(ctx)
	if err != nil {
		return Status{}, err
	}
	st := Status{Enabled: len(ds)+len(ps) > 0, Devices: []Device{}, BackupCodesRemaining: n}
	for _, d := range ds {
		st.Devices = append(st.Devices, Device{ID: d.ID, Type: "totp", Name: d.Name, CreatedAt: d.CreatedAt, LastUsedAt: d.LastUsedAt})
	}
	for _, p := range ps {
		st.Devices = append(st.Devices, Device{ID: p.ID, Type: "passkey", Name: p.Name, CreatedAt: p.CreatedAt, LastUsedAt: p.LastUsedAt})
	}
	return st, nil
}

// record writes an audit event for client c.
func (s *Service) record(ctx context.Context, c auth.Client, kind, detail string) {
	s.audit.Record(ctx, audit.Event{Kind: kind, Client: c.Addr, UserAgent: c.UserAgent, Detail: detail})
}

// fail audits a failed check; its reserved attempt stays counted in the
// shared rate limit.
func (s *Service) fail(ctx context.Context, c auth.Client, kind, detail string, err error) error {
	s.record(ctx, c, kind, detail+": "+err.Error())
	return err
}
