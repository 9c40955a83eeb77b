package totp

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Passkeys (WebAuthn) are second-factor devices beside the TOTP ones: each
// is listed in the status with type "passkey", removed as the others are,
// and the first device of either kind brings the backup codes. A passkey
// completes a login after the password and passes a step-up.

// Audit kinds of passkeys; failures are the login's and step-up's.
const (
	KindPasskeyAdded = "TOTP_PASSKEY_ADDED"
)

// CeremonyTTL bounds how long a passkey prompt may take.
const CeremonyTTL = 5 * time.Minute

// Ceremony kinds.
const (
	ceremonyRegister = "register"
	ceremonyLogin    = "login"
	ceremonyStepUp   = "step-up"
)

// The passkey failures the operator can act on.
var (
	ErrPasskeyRefused   = &Error{"the passkey was not accepted: use one registered here, on this dashboard's address"}
	ErrCeremonyExpired  = &Error{"the passkey prompt expired or was already answered: try again"}
	ErrPasskeyRequired  = &Error{"ceremony and credential are required"}
	ErrPasskeyDuplicate = &Error{"this passkey is already registered"}
)

// RP is the relying party a ceremony runs for: its ID (router.<domain>)
// and the origin the browser shows (scheme, host and port).
type RP struct{ ID, Origin string }

func (rp RP) webauthn() (*webauthn.WebAuthn, error) {
	return webauthn.New(&webauthn.Config{RPID: rp.ID, RPDisplayName: "tunnelsvc", RPOrigins: []string{rp.Origin},
		Timeouts: webauthn.TimeoutsConfig{
			Login:        webauthn.TimeoutConfig{Enforce: true, Timeout: CeremonyTTL, TimeoutUVD: CeremonyTTL},
			Registration: webauthn.TimeoutConfig{Enforce: true, Timeout: CeremonyTTL, TimeoutUVD: CeremonyTTL},
		}})
}

// operator is the one WebAuthn user: the operator, with a random handle
// kept in the settings and every passkey enrolled.
type operator struct {
	id    []byte
	creds []webauthn.Credential
	keys  []store.Passkey
}

func (o *operator) WebAuthnID() []byte                         { return o.id }
func (o *operator) WebAuthnName() string                       { return "operator" }
func (o *operator) WebAuthnDisplayName() string                { return "tunnelsvc operator" }
func (o *operator) WebAuthnCredentials() []webauthn.Credential { return o.creds }

// userHandleKey is the setting holding the operator's WebAuthn user handle.
const userHandleKey = "webauthn_user_handle"

func (s *Service) operator(ctx context.Context) (*operator, error) {
	h, err := s.st.GetSetting(ctx, userHandleKey)
	if errors.Is(err, store.ErrNotFound) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		// Another edge may make one at the same moment: the first stays.
		if _, err := s.st.SetSettingIfAbsent(ctx, userHandleKey, base64.RawURLEncoding.EncodeToString(b)); err != nil {
			return nil, err
		}
		if h, err = s.st.GetSetting(ctx, userHandleKey); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	id, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		return nil, fmt.Errorf("the WebAuthn user handle setting is not base64url: %w", err)
	}
	keys, err := s.st.ListPasskeys(ctx)
	if err != nil {
		return nil, err
	}
	o := &operator{id: id, keys: keys}
	for _, k := range keys {
		var c webauthn.Credential
		if err := json.Unmarshal([]byte(k.Credential), &c); err != nil {
			return nil, fmt.Errorf("passkey %s: %w", k.ID, err)
		}
		o.creds = append(o.creds, c)
	}
	return o, nil
}

func (s *Service) putCeremony(ctx context.Context, kind string, sd *webauthn.SessionData) (string, error) {
	id, err := auth.NewToken()
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(sd)
	if err != nil {
		return "", err
	}
	now := s.now()
	return id, s.st.PutCeremony(ctx, id, kind, string(b), now.Add(CeremonyTTL), now)
}

func (s *Service) takeCeremony(ctx context.Context, id, kind string) (webauthn.SessionData, error) {
	var sd webauthn.SessionData
	raw, err := s.st.TakeCeremony(ctx, id, kind, s.now())
	if errors.Is(err, store.ErrNotFound) {
		return sd, ErrCeremonyExpired
	}
	if err != nil {
		return sd, err
	}
	return sd, json.Unmarshal([]byte(raw), &sd)
}

// BeginPasskey starts registering a passkey: the options for
// navigator.credentials.create and the ceremony that FinishPasskey ends.
func (s *Service) BeginPasskey(ctx context.Context, rp RP) (*protocol.CredentialCreation, string, error) {
	w, err := rp.webauthn()
	if err != nil {
		return nil, "", err
	}
	o, err := s.operator(ctx)
	if err != nil {
		return nil, "", err
	}
	var exclude []protocol.CredentialDescriptor
	for _, c := range o.creds {
		exclude = append(exclude, c.Descriptor())
	}
	creation, sd, err := w.BeginRegistration(o,
		webauthn.WithExclusions(exclude),
		webauthn.WithResidentKeyRequirement(protocol.ResidentKeyRequirementPreferred),
		webauthn.WithAuthenticatorSelection(protocol.AuthenticatorSelection{
			ResidentKey: protocol.ResidentKeyRequirementPreferred, UserVerification: protocol.VerificationPreferred}))
	if err != nil {
		return nil, "", err
	}
	id, err := s.putCeremony(ctx, ceremonyRegister, sd)
	return creation, id, err
}

// FinishPasskey checks the browser's answer to ceremony and enrolls the
// passkey as name. The first second-factor device brings backup codes
// (returned once, as Confirm does).
func (s *Service) FinishPasskey(ctx context.Context, c auth.Client, rp RP, ceremony, name string, credential json.RawMessage) ([]string, error) {
	if strings.TrimSpace(name) == "" {
		name = "Passkey"
	}
	name, err := cleanName(name)
	if err != nil {
		return nil, err
	}
	if ceremony == "" || len(credential) == 0 {
		return nil, ErrPasskeyRequired
	}
	sd, err := s.takeCeremony(ctx, ceremony, ceremonyRegister)
	if err != nil {
		return nil, err
	}
	w, err := rp.webauthn()
	if err != nil {
		return nil, err
	}
	o, err := s.operator(ctx)
	if err != nil {
		return nil, err
	}
	parsed, err := protocol.ParseCredentialCreationResponseBytes(credential)
	if err != nil {
		return nil, &Error{"the passkey's answer could not be read: " + protocolWords(err)}
	}
	cred, err := w.CreateCredential(o, sd, parsed)
	if err != nil {
		s.record(ctx, c, KindStepUpFailed, "passkey registration refused: "+protocolWords(err))
		return nil, &Error{"the passkey was refused: " + protocolWords(err)}
	}
	raw, err := json.Marshal(cred)
	if err != nil {
		return nil, err
	}
	var backup []string
	var hashes []store.BackupCode
	if n, err := s.st.CountSecondFactors(ctx); err != nil {
		return nil, err
	} else if n == 0 {
		if backup, hashes, err = s.newBackupCodes(ctx, c); err != nil {
			return nil, err
		}
	}
	id, err := newDeviceID()
	if err != nil {
		return nil, err
	}
	first, err := s.st.InsertPasskey(ctx, store.Passkey{ID: "pk-" + id, Name: name,
		CredentialID: base64.RawURLEncoding.EncodeToString(cred.ID), Credential: string(raw), CreatedAt: s.now()}, hashes)
	if errors.Is(err, store.ErrConflict) {
		return nil, ErrPasskeyDuplicate
	}
	if err != nil {
		return nil, err
	}
	if !first {
		backup = nil
	}
	s.record(ctx, c, KindPasskeyAdded, fmt.Sprintf("passkey %q (pk-%s)", name, id))
	return backup, nil
}

// PendingFrom checks that pendingToken is a live pending login started
// from c's address (ErrPendingInvalid, ErrPendingOtherAddr otherwise),
// without spending one of its attempts: a passkey prompt is only handed
// out for a login whose password was right.
func (s *Service) PendingFrom(ctx context.Context, c auth.Client, pendingToken string) error {
	from, ok, err := s.st.LoginPendingFrom(ctx, auth.HashToken(pendingToken), s.now())
	switch {
	case err != nil:
		return err
	case !ok:
		return ErrPendingInvalid
	case from != c.Addr.String():
		return ErrPendingOtherAddr
	}
	return nil
}

// BeginPasskeyAssertion starts a passkey check for a login (after the
// password) or a step-up: the options for navigator.credentials.get and
// the ceremony. ErrNotEnabled when no passkey is enrolled.
func (s *Service) BeginPasskeyAssertion(ctx context.Context, rp RP, stepUp bool) (*protocol.CredentialAssertion, string, error) {
	w, err := rp.webauthn()
	if err != nil {
		return nil, "", err
	}
	o, err := s.operator(ctx)
	if err != nil {
		return nil, "", err
	}
	if len(o.creds) == 0 {
		return nil, "", &Error{"no passkey is registered: use a code"}
	}
	assertion, sd, err := w.BeginLogin(o, webauthn.WithUserVerification(protocol.VerificationPreferred))
	if err != nil {
		return nil, "", err
	}
	kind := ceremonyLogin
	if stepUp {
		kind = ceremonyStepUp
	}
	id, err := s.putCeremony(ctx, kind, sd)
	return assertion, id, err
}

// checkPasskey verifies the answer to ceremony of kind and records the
// passkey's use; it returns the passkey that answered.
func (s *Service) checkPasskey(ctx context.Context, rp RP, ceremony, kind string, credential json.RawMessage) (store.Passkey, error) {
	if ceremony == "" || len(credential) == 0 {
		return store.Passkey{}, ErrPasskeyRequired
	}
	sd, err := s.takeCeremony(ctx, ceremony, kind)
	if err != nil {
		return store.Passkey{}, err
	}
	w, err := rp.webauthn()
	if err != nil {
		return store.Passkey{}, err
	}
	o, err := s.operator(ctx)
	if err != nil {
		return store.Passkey{}, err
	}
	parsed, err := protocol.ParseCredentialRequestResponseBytes(credential)
	if err != nil {
		return store.Passkey{}, ErrPasskeyRefused
	}
	cred, err := w.ValidateLogin(o, sd, parsed)
	if err != nil {
		s.log.Info("passkey refused", "err", protocolWords(err))
		return store.Passkey{}, ErrPasskeyRefused
	}
	for _, k := range o.keys {
		if k.CredentialID == base64.RawURLEncoding.EncodeToString(cred.ID) {
			raw, err := json.Marshal(cred)
			if err != nil {
				return k, err
			}
			return k, s.st.UsePasskey(ctx, k.ID, string(raw), s.now())
		}
	}
	return store.Passkey{}, ErrPasskeyRefused
}

// CompleteLoginWithPasskey finishes a pending login (the password was
// right) with a passkey and returns the new session's token. As
// CompleteLogin: bound to the address that started it, every attempt
// reserved in the shared rate limit.
func (s *Service) CompleteLoginWithPasskey(ctx context.Context, c auth.Client, rp RP, pendingToken, ceremony string, credential json.RawMessage) (string, error) {
	if pendingToken == "" {
		return "", ErrPendingCodeRequired
	}
	res, hash, err := s.takeAttempt(ctx, c, pendingToken)
	if err != nil {
		return "", err
	}
	k, err := s.checkPasskey(ctx, rp, ceremony, ceremonyLogin, credential)
	return s.settleAttempt(ctx, c, res, hash, err, "2FA login with a passkey", func() {
		s.record(ctx, c, KindLoginSuccess, fmt.Sprintf("passkey %q (%s)", k.Name, k.ID))
	})
}

// StepUpWithPasskey is StepUp answered by a passkey.
func (s *Service) StepUpWithPasskey(ctx context.Context, c auth.Client, rp RP, ceremony string, credential json.RawMessage, action string) error {
	res, err := s.auth.Reserve(ctx, c)
	if err != nil {
		return err
	}
	_, err = s.checkPasskey(ctx, rp, ceremony, ceremonyStepUp, credential)
	var e *Error
	if errors.As(err, &e) {
		return s.fail(ctx, c, KindStepUpFailed, action+" with a passkey", err)
	}
	res.Release()
	return err
}

// protocolWords is a WebAuthn error in words: the library's details when
// it has them.
func protocolWords(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.Details != "" {
		return strings.TrimSuffix(pe.Details, ".")
	}
	return err.Error()
}

// Passwordless sign-in: with it on, a passkey alone opens the dashboard
// (no password, no code). The password stays the way back in, with the
// backup codes as its second step. Off by default; it can be on only
// while a passkey is enrolled.

// passwordlessKey is the setting: "on" or absent.
const passwordlessKey = "passkey_passwordless"

const ceremonyPasswordless = "passwordless"

// ErrNoPasskey: passwordless sign-in needs a passkey.
var ErrNoPasskey = &Error{"register a passkey first: passwordless sign-in uses one"}

// Passwordless reports whether a passkey alone signs in: the setting is
// on and a passkey is enrolled.
func (s *Service) Passwordless(ctx context.Context) (bool, error) {
	v, err := s.st.GetSetting(ctx, passwordlessKey)
	if errors.Is(err, store.ErrNotFound) || (err == nil && v != "on") {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	ps, err := s.st.ListPasskeys(ctx)
	return len(ps) > 0, err
}

// SetPasswordless turns passwordless sign-in on or off; on needs a passkey.
func (s *Service) SetPasswordless(ctx context.Context, c auth.Client, on bool) error {
	if on {
		ps, err := s.st.ListPasskeys(ctx)
		if err != nil {
			return err
		}
		if len(ps) == 0 {
			return ErrNoPasskey
		}
		if err := s.st.SetSetting(ctx, passwordlessKey, "on"); err != nil {
			return err
		}
		s.record(ctx, c, KindPasswordless, "passwordless sign-in with a passkey turned on")
		return nil
	}
	if err := s.st.DeleteSetting(ctx, passwordlessKey); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	s.record(ctx, c, KindPasswordless, "passwordless sign-in with a passkey turned off")
	return nil
}

// passkeysGone turns passwordless sign-in off once no passkey is left, so
// that a passkey registered later does not turn it back on by itself: it
// stays off until the operator turns it on again.
// HasPasskey says whether a passkey is registered (one may then answer the
// second step of a login).
func (s *Service) HasPasskey(ctx context.Context) (bool, error) {
	ps, err := s.st.ListPasskeys(ctx)
	return len(ps) > 0, err
}

func (s *Service) passkeysGone(ctx context.Context, c auth.Client) error {
	on, err := s.st.GetSetting(ctx, passwordlessKey)
	if errors.Is(err, store.ErrNotFound) || err == nil && on != "on" {
		return nil
	}
	if err != nil {
		return err
	}
	if some, err := s.HasPasskey(ctx); err != nil || some {
		return err
	}
	if err := s.st.DeleteSetting(ctx, passwordlessKey); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	s.record(ctx, c, KindPasswordless, "passwordless sign-in with a passkey turned off: no passkey is left")
	return nil
}

// KindPasswordless audits a change of passwordless sign-in.
const KindPasswordless = "TOTP_PASSWORDLESS_CHANGED"

// ErrPasswordlessOff: a passkey-only sign-in while it is off.
var ErrPasswordlessOff = &Error{"passwordless sign-in is off: log in with the password"}

// BeginPasswordless starts a sign-in with a passkey alone (a discoverable
// credential: the browser offers the passkeys it holds for this name).
func (s *Service) BeginPasswordless(ctx context.Context, rp RP) (*protocol.CredentialAssertion, string, error) {
	on, err := s.Passwordless(ctx)
	if err != nil {
		return nil, "", err
	}
	if !on {
		return nil, "", ErrPasswordlessOff
	}
	w, err := rp.webauthn()
	if err != nil {
		return nil, "", err
	}
	assertion, sd, err := w.BeginDiscoverableLogin(webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		return nil, "", err
	}
	id, err := s.putCeremony(ctx, ceremonyPasswordless, sd)
	return assertion, id, err
}

// CompletePasswordless checks a passkey-only sign-in and returns the new
// session's token. Every attempt is reserved in the shared rate limit; a
// refusal is audited as a failed login.
func (s *Service) CompletePasswordless(ctx context.Context, c auth.Client, rp RP, ceremony string, credential json.RawMessage) (string, error) {
	if ceremony == "" || len(credential) == 0 {
		return "", ErrPasskeyRequired
	}
	res, err := s.auth.Reserve(ctx, c)
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		return "", s.fail(ctx, c, KindLoginFailed, "passwordless sign-in with a passkey", err)
	}
	on, err := s.Passwordless(ctx)
	if err != nil {
		res.Release()
		return "", err
	}
	if !on {
		return fail(ErrPasswordlessOff)
	}
	sd, err := s.takeCeremony(ctx, ceremony, ceremonyPasswordless)
	var e *Error
	if errors.As(err, &e) {
		return fail(err)
	}
	if err != nil {
		res.Release()
		return "", err
	}
	w, err := rp.webauthn()
	if err != nil {
		res.Release()
		return "", err
	}
	o, err := s.operator(ctx)
	if err != nil {
		res.Release()
		return "", err
	}
	parsed, err := protocol.ParseCredentialRequestResponseBytes(credential)
	if err != nil {
		return fail(ErrPasskeyRefused)
	}
	_, cred, err := w.ValidatePasskeyLogin(func(_, userHandle []byte) (webauthn.User, error) {
		if !bytesEqual(userHandle, o.id) {
			return nil, errors.New("not this dashboard's operator")
		}
		return o, nil
	}, sd, parsed)
	if err != nil {
		s.log.Info("passwordless passkey refused", "err", protocolWords(err))
		return fail(ErrPasskeyRefused)
	}
	var used store.Passkey
	for _, k := range o.keys {
		if k.CredentialID == base64.RawURLEncoding.EncodeToString(cred.ID) {
			used = k
		}
	}
	if raw, err := json.Marshal(cred); err == nil && used.ID != "" {
		if err := s.st.UsePasskey(ctx, used.ID, string(raw), s.now()); err != nil {
			res.Release()
			return "", err
		}
	}
	res.Release()
	s.auth.LoginSucceeded(c)
	s.record(ctx, c, KindLoginSuccess, fmt.Sprintf("passwordless, passkey %q (%s)", used.Name, used.ID))
	return s.auth.Sessions.Create(ctx, c.Addr.String(), c.UserAgent)
}

func bytesEqual(a, b []byte) bool { return len(a) == len(b) && string(a) == string(b) }
