package agent

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// How the daemon and the agent prove themselves to each other without the
// agent token ever crossing the wire. The daemon reaches the agent at
// 127.0.0.1:<agent port> on the server, where frps listens for the machine's
// agent tunnel; while the machine is offline any local user of the server
// can listen there instead. So:
//
//  1. The daemon asks GET /challenge with a fresh nonce (HeaderNonce). The
//     agent answers a challenge, and signs its answer with the token, bound
//     to that nonce (HeaderSignature = ResponseSignature). A squatter cannot
//     sign: the daemon stops there and sends it nothing else.
//  2. On the same connection the daemon sends the real request with the
//     challenge (HeaderChallenge), another fresh nonce, and
//     HeaderSignature = RequestSignature over method, path and query, the
//     SHA-256 of the body, the challenge and the nonce.
//  3. The agent checks the signature and that the challenge is its own
//     (a MAC under a key of this agent process), younger than
//     ChallengeLifetime and not used before; then it answers, signed and
//     bound to the request's nonce.
//
// A captured request cannot be replayed: its challenge is used (or, after a
// restart of the agent, was issued under a key that is gone). Freshness rests
// on the agent's own monotonic clock, so the two clocks need not agree.
const (
	HeaderNonce     = "X-Agent-Nonce"
	HeaderChallenge = "X-Agent-Challenge"
	HeaderSignature = "X-Agent-Signature"
)

// ChallengeLifetime is how long a challenge can be used (once).
const ChallengeLifetime = 30 * time.Second

// maxUsed bounds the memory of used challenges; only correctly signed
// requests add to it, within ChallengeLifetime.
const maxUsed = 4096

// NewNonce is 128 random bits in hex.
func NewNonce() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b)
}

var nonceRe = regexp.MustCompile(`^[0-9a-f]{32}$`)

// ValidNonce says whether n has NewNonce's form.
func ValidNonce(n string) bool { return nonceRe.MatchString(n) }

func mac(token string, parts ...string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(strings.Join(parts, "\n")))
	return hex.EncodeToString(m.Sum(nil))
}

func bodySum(body []byte) string {
	s := sha256.Sum256(body)
	return hex.EncodeToString(s[:])
}

// RequestSignature is the daemon's signature of a request; uri is the path
// with its query, as sent.
func RequestSignature(token, method, uri string, body []byte, challenge, nonce string) string {
	return mac(token, "tunnel-agent request v1", method, uri, bodySum(body), challenge, nonce)
}

// ResponseSignature is the agent's signature of its answer to the request
// that carried nonce.
func ResponseSignature(token, nonce string, status int, body []byte) string {
	return mac(token, "tunnel-agent response v1", nonce, strconv.Itoa(status), bodySum(body))
}

// SignatureOK compares signatures in constant time.
func SignatureOK(got, want string) bool {
	return hmac.Equal([]byte(got), []byte(want))
}

// challenges issues and redeems challenges for one agent process.
type challenges struct {
	mu   sync.Mutex
	key  []byte
	boot time.Time
	used map[string]time.Duration // challenge -> age at which it expires
}

func (c *challenges) init(now time.Time) {
	if c.key == nil {
		c.key = make([]byte, 32)
		if _, err := rand.Read(c.key); err != nil {
			panic("crypto/rand: " + err.Error())
		}
		c.boot = now
		c.used = map[string]time.Duration{}
	}
}

// issue returns a new challenge: its issue time on this process's clock, a
// random part, and a MAC under this process's key.
func (c *challenges) issue(now time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init(now)
	body := strconv.FormatInt(int64(now.Sub(c.boot)), 10) + "." + NewNonce()
	return body + "." + c.sum(body)
}

func (c *challenges) sum(body string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

// redeem accepts a challenge once, if this process issued it within
// ChallengeLifetime. Call it only for a request whose signature is good.
func (c *challenges) redeem(ch string, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init(now)
	parts := strings.Split(ch, ".")
	if len(parts) != 3 || !hmac.Equal([]byte(parts[2]), []byte(c.sum(parts[0]+"."+parts[1]))) {
		return fmt.Errorf("the challenge was not issued by this agent (it may have restarted): ask for a new one")
	}
	at, _ := strconv.ParseInt(parts[0], 10, 64)
	age := now.Sub(c.boot)
	if age < time.Duration(at) || age-time.Duration(at) > ChallengeLifetime {
		return fmt.Errorf("the challenge is older than %s: ask for a new one", ChallengeLifetime)
	}
	for k, exp := range c.used {
		if exp < age {
			delete(c.used, k)
		}
	}
	if _, seen := c.used[ch]; seen {
		return fmt.Errorf("the challenge was used already (a replayed request)")
	}
	if len(c.used) >= maxUsed {
		return fmt.Errorf("too many requests within %s", ChallengeLifetime)
	}
	c.used[ch] = time.Duration(at) + ChallengeLifetime
	return nil
}
