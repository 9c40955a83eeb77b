package totp

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"
	qrcode "github.com/skip2/go-qrcode"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Enrollment is spec §2 "2FA enrollment (pending)".
type Enrollment struct {
	Secret    string `json:"secret"`
	QRDataURL string `json:"qr_data_url"`
}

// qrSize is the QR image's width and height in pixels.
const qrSize = 256

// Enroll starts an enrollment, replacing any pending one. host is the
// request's Host, the account name when no domain is configured.
func (s *Service) Enroll(ctx context.Context, host string) (Enrollment, error) {
	key, err := totp.Generate(totp.GenerateOpts{
		Issuer: Issuer, AccountName: s.accountName(ctx, host),
		Period: period, SecretSize: 20, Digits: digits, Algorithm: otp.AlgorithmSHA1,
	})
	if err != nil {
		return Enrollment{}, err
	}
	id, err := newDeviceID()
	if err != nil {
		return Enrollment{}, err
	}
	err = s.st.PutTOTPEnrollment(ctx, store.TOTPEnrollment{
		DeviceID:     id,
		SecretSealed: s.sealer.Seal([]byte(key.Secret()), aad(id)),
		ExpiresAt:    s.now().Add(EnrollmentTTL),
	})
	if err != nil {
		return Enrollment{}, err
	}
	png, err := qrcode.Encode(key.URL(), qrcode.Medium, qrSize)
	if err != nil {
		return Enrollment{}, err
	}
	return Enrollment{
		Secret:    key.Secret(),
		QRDataURL: "data:image/png;base64," + base64.StdEncoding.EncodeToString(png),
	}, nil
}

// accountName is the otpauth URI's account: the configured domain, else the
// host the request came by.
func (s *Service) accountName(ctx context.Context, host string) string {
	if d, err := (localsetup.Settings{Store: s.st}).Domain(ctx); err == nil && strings.TrimSpace(d) != "" {
		return strings.TrimSpace(d)
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" {
		return Issuer
	}
	return host
}

func newDeviceID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// defaultDeviceName names a device confirmed without a name.
const defaultDeviceName = "Authenticator"

func cleanName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return defaultDeviceName, nil
	}
	if utf8.RuneCountInString(name) > 64 {
		return "", ErrNameTooLong
	}
	if strings.ContainsFunc(name, unicode.IsControl) {
		return "", ErrNameControl
	}
	return name, nil
}

// Confirm commits the pending enrollment when code is its current code.
// The first device turns 2FA on and returns the backup codes, once; later
// devices return none.
func (s *Service) Confirm(ctx context.Context, c auth.Client, code, name string) (backupCodes []string, err error) {
	code = normalize(code)
	if code == "" {
		return nil, ErrCodeRequired
	}
	name, err = cleanName(name)
	if err != nil {
		return nil, err
	}
	en, err := s.st.GetTOTPEnrollment(ctx)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !s.now().Before(en.ExpiresAt)) {
		return nil, ErrNoEnrollment
	}
	if err != nil {
		return nil, err
	}
	secret, err := s.sealer.Open(en.SecretSealed, aad(en.DeviceID))
	if err != nil {
		return nil, err
	}
	// A wrong code here proves nothing about the caller (it already holds
	// the new secret), so it is neither rate-limited nor audited.
	if !isTOTPShape(code) {
		return nil, ErrInvalidCode
	}
	st, ok, err := matchStep(string(secret), code, s.now())
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrInvalidCode
	}
	var hashes []store.BackupCode
	if n, err := s.st.CountSecondFactors(ctx); err != nil {
		return nil, err
	} else if n == 0 {
		if backupCodes, hashes, err = s.newBackupCodes(ctx, c); err != nil {
			return nil, err
		}
	}
	now := s.now()
	first, err := s.st.ConfirmTOTPDevice(ctx, store.TOTPDevice{
		ID: en.DeviceID, Name: name, SecretSealed: en.SecretSealed,
		CreatedAt: now, LastStep: st, // its confirm code is spent too
	}, hashes)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrNoEnrollment
	}
	if err != nil {
		return nil, err
	}
	if first && hashes == nil {
		// Every device was removed between the count and the commit.
		if backupCodes, hashes, err = s.newBackupCodes(ctx, c); err != nil {
			return nil, err
		}
		if err := s.st.ReplaceBackupCodes(ctx, hashes, now); err != nil {
			return nil, err
		}
	}
	if !first {
		backupCodes = nil
	}
	s.record(ctx, c, KindDeviceAdded, fmt.Sprintf("device %q (%s)", name, en.DeviceID))
	if first {
		s.record(ctx, c, KindEnabled, "")
	}
	return backupCodes, nil
}
