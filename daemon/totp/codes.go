package totp

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/hotp"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// TOTP parameters (issue 4): every authenticator app's defaults.
const (
	period = 30
	digits = otp.DigitsSix
	skew   = 1 // steps accepted either side of now
)

// step is the RFC 6238 time step of t.
func step(t time.Time) int64 { return t.Unix() / period }

// codeAt is the code of secret (base32) at time step st.
func codeAt(secret string, st int64) (string, error) {
	return hotp.GenerateCodeCustom(secret, uint64(st), hotp.ValidateOpts{Digits: digits, Algorithm: otp.AlgorithmSHA1})
}

// matchStep returns the step within the tolerance at which code is secret's
// code, or ok false.
func matchStep(secret, code string, now time.Time) (int64, bool, error) {
	cur := step(now)
	for st := cur - skew; st <= cur+skew; st++ {
		want, err := codeAt(secret, st)
		if err != nil {
			return 0, false, err
		}
		if subtle.ConstantTimeCompare([]byte(want), []byte(code)) == 1 {
			return st, true, nil
		}
	}
	return 0, false, nil
}

// normalize drops spaces and dashes and upper-cases, so "abcde-fghij",
// "ABCDEFGHIJ" and "123 456" are read as the operator meant them.
func normalize(code string) string {
	return strings.ToUpper(strings.Map(func(r rune) rune {
		if r == ' ' || r == '-' || r == '\t' {
			return -1
		}
		return r
	}, code))
}

func isTOTPShape(c string) bool {
	if len(c) != digits.Length() {
		return false
	}
	for _, r := range c {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// match is what a verified code turned out to be: a device's code at a
// step, or a backup code.
type match struct {
	device   *store.TOTPDevice
	step     int64
	backupID int64
}

func (m match) isBackup() bool { return m.device == nil }

func aad(deviceID string) []byte { return []byte("totp:" + deviceID) }

// find checks code against every device (and the backup codes when
// allowBackup) without using it up. A device's code whose step was already
// accepted is ErrCodeReused. A backup code costs one argon2id hash, run for
// c through the daemon's one bound; a busy bound is a *auth.RateLimitedError.
func (s *Service) find(ctx context.Context, c auth.Client, code string, allowBackup bool) (match, error) {
	n := normalize(code)
	now := s.now()
	if isTOTPShape(n) {
		devices, err := s.st.ListTOTPDevices(ctx)
		if err != nil {
			return match{}, err
		}
		reused := false
		for i := range devices {
			d := &devices[i]
			secret, err := s.sealer.Open(d.SecretSealed, aad(d.ID))
			if err != nil {
				return match{}, fmt.Errorf("device %s: %w", d.ID, err)
			}
			st, ok, err := matchStep(string(secret), n, now)
			if err != nil {
				return match{}, err
			}
			if !ok {
				continue
			}
			if st <= d.LastStep {
				reused = true
				continue
			}
			return match{device: d, step: st}, nil
		}
		if reused {
			return match{}, ErrCodeReused
		}
		return match{}, ErrInvalidCode
	}
	if !allowBackup || !isBackupShape(n) {
		return match{}, ErrInvalidCode
	}
	lookup := ""
	if len(n) == backupLen {
		lookup = n[:backupLookupLen]
	}
	// With a prefix this is at most one code. Codes issued before prefixes
	// existed are tried one hash at a time, each through the bound.
	codes, err := s.st.BackupCodesByLookup(ctx, lookup)
	if err != nil {
		return match{}, err
	}
	for _, bc := range codes {
		ok, err := s.backupMatches(ctx, c, bc.CodeHash, n)
		if err != nil {
			return match{}, err
		}
		if ok {
			return match{backupID: bc.ID}, nil
		}
	}
	return match{}, ErrInvalidCode
}

// use spends a found code: the device's replay guard moves to its step, or
// the backup code is deleted. Losing a race with the same code is a reuse.
func (s *Service) use(ctx context.Context, m match) error {
	var ok bool
	var err error
	if m.isBackup() {
		ok, err = s.st.UseBackupCode(ctx, m.backupID)
	} else {
		ok, err = s.st.UseTOTPStep(ctx, m.device.ID, m.step, s.now())
	}
	if err != nil {
		return err
	}
	if !ok {
		return ErrCodeReused
	}
	return nil
}

// Backup codes: 10 of LLL-SSSSS-SSSSS from an alphabet without look-alikes.
// LLL is a non-secret lookup prefix, distinct within a set, stored in the
// clear so that a guess is checked against one code (one hash), not ten.
// The ten S characters (about 49 bits) are the secret; the whole code is
// stored only as a salted argon2id hash so a copied database does not give
// it away to a quick brute force. Codes issued before the prefix existed
// are XXXXX-XXXXX with no lookup; they keep working (see find) until new
// codes are issued.
const (
	backupCount     = 10
	backupLookupLen = 3
	backupSecretLen = 10
	backupLen       = backupLookupLen + backupSecretLen
	legacyBackupLen = 10
	backupAlphabet  = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
	// argon2id at OWASP's minimum (19 MiB, t=2): about 30 ms a hash.
	backupTime    = 2
	backupMemory  = 19 * 1024
	backupThreads = 1
	backupKeyLen  = 32
)

func isBackupShape(n string) bool {
	if len(n) != backupLen && len(n) != legacyBackupLen {
		return false
	}
	for i := 0; i < len(n); i++ {
		if !strings.ContainsRune(backupAlphabet, rune(n[i])) {
			return false
		}
	}
	return true
}

// newBackupCodes returns fresh codes for the operator and their stored
// form, hashing for c through the daemon's bound.
func (s *Service) newBackupCodes(ctx context.Context, c auth.Client) (plain []string, stored []store.BackupCode, err error) {
	lookups := map[string]bool{}
	for len(plain) < backupCount {
		raw, err := randomString(backupLen)
		if err != nil {
			return nil, nil, err
		}
		lookup := raw[:backupLookupLen]
		if lookups[lookup] {
			continue
		}
		lookups[lookup] = true
		sec := raw[backupLookupLen:]
		code := lookup + "-" + sec[:backupSecretLen/2] + "-" + sec[backupSecretLen/2:]
		h, err := s.hashBackup(ctx, c, raw)
		if err != nil {
			return nil, nil, err
		}
		plain = append(plain, code)
		stored = append(stored, store.BackupCode{CodeHash: h, Lookup: lookup})
	}
	return plain, stored, nil
}

func randomString(n int) (string, error) {
	var sb strings.Builder
	for range n {
		ch, err := randomChar()
		if err != nil {
			return "", err
		}
		sb.WriteByte(ch)
	}
	return sb.String(), nil
}

// randomChar draws uniformly from backupAlphabet (rejection sampling, so no
// character is likelier than another).
func randomChar() (byte, error) {
	limit := 256 - 256%len(backupAlphabet)
	var b [1]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		if int(b[0]) < limit {
			return backupAlphabet[int(b[0])%len(backupAlphabet)], nil
		}
	}
}

func (s *Service) hashBackup(ctx context.Context, c auth.Client, normalized string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key, err := s.auth.IDKey(ctx, c, []byte(normalized), salt, backupTime, backupMemory, backupThreads, backupKeyLen)
	if err != nil {
		return "", err
	}
	b64 := base64.RawStdEncoding
	return "argon2id$" + b64.EncodeToString(salt) + "$" + b64.EncodeToString(key), nil
}

func (s *Service) backupMatches(ctx context.Context, c auth.Client, encoded, normalized string) (bool, error) {
	parts := strings.Split(encoded, "$")
	if len(parts) != 3 || parts[0] != "argon2id" {
		return false, nil
	}
	b64 := base64.RawStdEncoding
	salt, err1 := b64.DecodeString(parts[1])
	want, err2 := b64.DecodeString(parts[2])
	if err1 != nil || err2 != nil || len(want) != backupKeyLen {
		return false, nil
	}
	got, err := s.auth.IDKey(ctx, c, []byte(normalized), salt, backupTime, backupMemory, backupThreads, backupKeyLen)
	if err != nil {
		return false, err
	}
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}
