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
	"golang.org/x/crypto/argon2"

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
// accepted is ErrCodeReused.
func (s *Service) find(ctx context.Context, code string, allowBackup bool) (match, error) {
	c := normalize(code)
	now := s.now()
	if isTOTPShape(c) {
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
			st, ok, err := matchStep(string(secret), c, now)
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
	if allowBackup && len(c) == backupLen {
		codes, err := s.st.ListBackupCodes(ctx)
		if err != nil {
			return match{}, err
		}
		for _, bc := range codes {
			if backupMatches(bc.CodeHash, c) {
				return match{backupID: bc.ID}, nil
			}
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

// Backup codes: 10 of XXXXX-XXXXX from an alphabet without look-alikes
// (about 49 bits each), stored as salted argon2id hashes so a copied
// database does not give them away to a quick brute force.
const (
	backupCount    = 10
	backupLen      = 10
	backupAlphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
	// argon2id at OWASP's minimum (19 MiB, t=2): about 30 ms a hash, and
	// at most 10 hashes per backup-code attempt, which the rate limit bounds.
	backupTime    = 2
	backupMemory  = 19 * 1024
	backupThreads = 1
	backupKeyLen  = 32
)

// newBackupCodes returns fresh codes for the operator and their hashes.
func newBackupCodes() (plain, hashes []string, err error) {
	for range backupCount {
		var sb strings.Builder
		for i := 0; i < backupLen; i++ {
			if i == backupLen/2 {
				sb.WriteByte('-')
			}
			ch, err := randomChar()
			if err != nil {
				return nil, nil, err
			}
			sb.WriteByte(ch)
		}
		code := sb.String()
		h, err := hashBackup(normalize(code))
		if err != nil {
			return nil, nil, err
		}
		plain = append(plain, code)
		hashes = append(hashes, h)
	}
	return plain, hashes, nil
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

func hashBackup(normalized string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key := argon2.IDKey([]byte(normalized), salt, backupTime, backupMemory, backupThreads, backupKeyLen)
	b64 := base64.RawStdEncoding
	return "argon2id$" + b64.EncodeToString(salt) + "$" + b64.EncodeToString(key), nil
}

func backupMatches(encoded, normalized string) bool {
	parts := strings.Split(encoded, "$")
	if len(parts) != 3 || parts[0] != "argon2id" {
		return false
	}
	b64 := base64.RawStdEncoding
	salt, err1 := b64.DecodeString(parts[1])
	want, err2 := b64.DecodeString(parts[2])
	if err1 != nil || err2 != nil || len(want) != backupKeyLen {
		return false
	}
	got := argon2.IDKey([]byte(normalized), salt, backupTime, backupMemory, backupThreads, backupKeyLen)
	return subtle.ConstantTimeCompare(got, want) == 1
}
