// Package auth holds the operator's credentials: password hashing and rules,
// sessions, the login rate limit, and the client-address rule they share.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nbutton23/zxcvbn-go/matching"
	"golang.org/x/crypto/argon2"
)

// argon2id parameters (RFC 9106's second recommended option, with 64 MiB).
// They are stored in each hash, so raising them later still verifies old
// hashes.
const (
	argonTime    = 3
	argonMemory  = 64 * 1024
	argonThreads = 2
	argonKeyLen  = 32
	argonSaltLen = 16
)

// argonCost is what a new password hash costs. Each hash records its own
// parameters, so one made at another cost still verifies.
var argonCost = struct {
	time, memory uint32
	threads      uint8
}{argonTime, argonMemory, argonThreads}

// LowCostForTests makes new password hashes cheap (t=1, 1 MiB, one lane)
// for the rest of the process. It is for the tests of other packages,
// which set up and log in hundreds of times to test what the dashboard
// answers, not what argon2id costs (this package's own tests keep the real
// cost). It panics outside a test binary, so the shipped daemon can never
// be made to hash weakly.
func LowCostForTests() {
	if !testing.Testing() {
		panic("auth: LowCostForTests called outside a test binary")
	}
	lowCost()
}

// lowCost is LowCostForTests without its check; the dashboard's test
// build (lowcost_uitest.go) calls it too.
func lowCost() {
	argonCost.time, argonCost.memory, argonCost.threads = 1, 1024, 1
	// Other argon2id hashes (2FA backup codes) record no parameters: the
	// gate runs them at this cost too, so they still verify in-process.
	lowCostIDKey.Store(true)
	// The strength check's dictionaries, built once instead of after each
	// garbage collection (about 100 ms per set-up).
	matching.Keep()
}

// hashPassword returns a PHC-format argon2id hash of pw, hashed through g.
func hashPassword(ctx context.Context, g *Gate, t Ticket, pw string) (string, error) {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	c := argonCost
	key, err := g.IDKey(ctx, t, []byte(pw), salt, c.time, c.memory, c.threads, argonKeyLen)
	if err != nil {
		return "", err
	}
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, c.memory, c.time, c.threads, b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

var errBadHash = errors.New("stored password hash is malformed")

// verifyPassword reports whether pw matches the encoded hash, hashing
// through g.
func verifyPassword(ctx context.Context, g *Gate, t Ticket, encoded, pw string) (bool, error) {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false, errBadHash
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, errBadHash
	}
	var m uint32
	var tm uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &tm, &p); err != nil {
		return false, errBadHash
	}
	b64 := base64.RawStdEncoding
	salt, err := b64.DecodeString(parts[4])
	if err != nil {
		return false, errBadHash
	}
	want, err := b64.DecodeString(parts[5])
	if err != nil || len(want) == 0 {
		return false, errBadHash
	}
	got, err := g.IDKey(ctx, t, []byte(pw), salt, tm, m, p, uint32(len(want)))
	if err != nil {
		return false, err
	}
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

// HashPassword hashes a password that is not the operator's (an access
// gate's shared password, set by the operator) through the daemon's one
// argon2id bound.
func HashPassword(ctx context.Context, pw string) (string, error) {
	return hashPassword(ctx, defaultGate, Ticket{Priority: true}, pw)
}

// VerifyClientPassword checks a password that is not the operator's (an
// access gate's) for client c through the same bound as the dashboard's
// login: one hash in flight per client, a bounded queue, and a
// *RateLimitedError when the bound is full.
func VerifyClientPassword(ctx context.Context, c Client, encoded, pw string) (bool, error) {
	return verifyPassword(ctx, defaultGate, clientTicket(c, nil), encoded, pw)
}
