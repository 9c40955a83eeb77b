package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

func xff(addr string) map[string]string { return map[string]string{"X-Forwarded-For": addr} }

// wrongCode is a 6-digit code that is not secret's code now or a step
// either side.
func (e *testEnv) wrongCode(secret string) string {
	for _, c := range []string{"000000", "111111", "222222", "333333"} {
		if c != codeFor(e.t, secret, e.now) && c != codeFor(e.t, secret, e.now.Add(30*time.Second)) && c != codeFor(e.t, secret, e.now.Add(-30*time.Second)) {
			return c
		}
	}
	e.t.Fatal("no wrong code found")
	return ""
}

func TestPendingTokenDiesAfterFiveWrongCodes(t *testing.T) {
	e := newEnv(t)
	session := e.setup()
	secret, _ := e.enableTOTP(session, "phone")
	e.now = e.now.Add(30 * time.Second) // past the step spent at confirm
	wrong := e.wrongCode(secret)
	pending := e.pendingLogin("")
	for i := 0; i < 5; i++ {
		wantError(t, e.login2FA(pending, wrong, ""), 401, "invalid code")
	}
	// The right code no longer completes this login.
	wantError(t, e.login2FA(pending, codeFor(t, secret, e.now), ""), 401,
		"the login has expired or is not valid: log in with the password again")
	// A new login with the same code works.
	if r := e.login2FA(e.pendingLogin(""), codeFor(t, secret, e.now), ""); r.Code != 200 {
		t.Fatalf("fresh login: %d %s", r.Code, r.Body)
	}
}

func TestPendingTokenBoundToItsAddress(t *testing.T) {
	e := newEnv(t)
	session := e.setup()
	secret, _ := e.enableTOTP(session, "phone")
	e.now = e.now.Add(30 * time.Second) // past the step spent at confirm
	owner, thief := "198.51.100.40:1000", "203.0.113.41:1000"
	pending := e.pendingLogin(owner)
	wantError(t, e.login2FA(pending, codeFor(t, secret, e.now), thief), 401,
		"this login was started from another address: log in with the password again")
	if sessionCookie(t, e.login2FA(pending, codeFor(t, secret, e.now), thief)) != nil {
		t.Fatal("a session was issued to another address")
	}
	if r := e.login2FA(pending, codeFor(t, secret, e.now), owner); r.Code != 200 || sessionCookie(t, r) == nil {
		t.Fatalf("owner: %d %s", r.Code, r.Body)
	}
	kinds := e.auditKinds()
	if countKind(kinds, "LOGIN_2FA_FAILED") != 2 {
		t.Fatalf("the foreign attempts are not audited: %v", kinds)
	}
}

func TestIPv6FailuresCountPerSlash64(t *testing.T) {
	e := newEnv(t)
	e.setup()
	// Through the local proxy, each attempt from another address of one /64.
	for i := 1; i <= auth.MaxFailures; i++ {
		wantError(t, e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"wrong"}`,
			header: xff(fmt.Sprintf("2001:db8:5:6::%x", i))}), 401, "invalid password")
	}
	r := e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`, header: xff("2001:db8:5:6:aaaa:bbbb:cccc:dddd")})
	wantError(t, r, 429, "too many attempts; try again later (in 300 seconds)")
	if r.Header().Get("Retry-After") != "300" {
		t.Fatalf("Retry-After %q", r.Header().Get("Retry-After"))
	}
	if r := e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`, header: xff("2001:db8:5:7::1")}); r.Code != 200 {
		t.Fatalf("the next /64: %d %s", r.Code, r.Body)
	}
}

func TestSetupCodeGuessesCount(t *testing.T) {
	e := newEnv(t)
	code, _, err := auth.LoadOrCreateSetupCode(e.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"password":"` + goodPassword + `"}`
	peer := "203.0.113.50:4000"
	for i := 0; i < auth.MaxFailures; i++ {
		wantError(t, e.do(req{method: "POST", path: "/api/auth/setup", body: body, peer: peer,
			header: map[string]string{"X-Setup-Code": fmt.Sprintf("AAAA-BBBB-%04d", i)}}), 403, auth.ErrSetupCodeRequired.Error())
	}
	r := e.do(req{method: "POST", path: "/api/auth/setup", body: body, peer: peer, header: map[string]string{"X-Setup-Code": code}})
	wantError(t, r, 429, "too many attempts; try again later (in 300 seconds)")
	if r.Header().Get("Retry-After") != "300" {
		t.Fatalf("Retry-After %q", r.Header().Get("Retry-After"))
	}
	if n := countKind(e.auditKinds(), "SETUP_CODE_FAILED"); n != auth.MaxFailures {
		t.Fatalf("SETUP_CODE_FAILED %d times, want %d", n, auth.MaxFailures)
	}
	if ok, _ := e.authSvc.Configured(context.Background()); ok {
		t.Fatal("a refused setup configured the service")
	}
}

// TestGlobalFailureBudget: many addresses together spend the minute's
// budget; then every client without a session gets 429 and the daemon logs
// it, while a client with a session is not locked out.
func TestGlobalFailureBudget(t *testing.T) {
	e := newEnv(t)
	var logs bytes.Buffer
	e.authSvc.Limiter.Log = slog.New(slog.NewTextHandler(&logs, nil))
	if _, _, err := auth.LoadOrCreateSetupCode(e.cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	body := `{"password":"` + goodPassword + `"}`
	for i := 0; i < auth.GlobalFailures; i++ {
		wantError(t, e.do(req{method: "POST", path: "/api/auth/setup", body: body,
			peer: fmt.Sprintf("203.0.%d.%d:1", 113+i/200, 1+i%200), header: map[string]string{"X-Setup-Code": "WRONG"}}), 403, "")
	}
	// The box's own setup needs no code and is not a guess.
	session := e.setup()
	r := e.do(req{method: "POST", path: "/api/auth/login", body: body, peer: "192.0.2.200:1"})
	wantError(t, r, 429, "too many attempts; try again later (in 60 seconds)")
	if r.Header().Get("Retry-After") != "60" {
		t.Fatalf("Retry-After %q", r.Header().Get("Retry-After"))
	}
	wantError(t, e.login2FA("whatever", "123456", "192.0.2.201:1"), 429, "")
	if !strings.Contains(logs.String(), "global login failure budget exhausted") {
		t.Fatalf("no log line:\n%s", logs.String())
	}
	// Refusals for the global budget are audited apart from the client's
	// own lockouts: they are no failure of that client.
	kinds := e.auditKinds()
	if countKind(kinds, "LOGIN_GLOBAL_LIMITED") != 2 || countKind(kinds, "LOGIN_RATE_LIMITED") != 0 {
		t.Fatalf("audit kinds %v", kinds)
	}
	// With a session the same login goes through.
	if r := e.do(req{method: "POST", path: "/api/auth/login", body: body, peer: "192.0.2.200:1", cookie: session}); r.Code != 200 {
		t.Fatalf("with a session: %d %s", r.Code, r.Body)
	}
	// The address that set the box up is known: the budget does not lock
	// the operator out there, while a new address stays refused.
	if r := e.do(req{method: "POST", path: "/api/auth/login", body: body}); r.Code != 200 {
		t.Fatalf("from the address that set the box up: %d %s", r.Code, r.Body)
	}
	wantError(t, e.do(req{method: "POST", path: "/api/auth/login", body: body, peer: "192.0.2.202:1"}), 429, "")
	e.now = e.now.Add(time.Minute)
	if r := e.do(req{method: "POST", path: "/api/auth/login", body: body, peer: "192.0.2.200:1"}); r.Code != 200 {
		t.Fatalf("a minute later: %d %s", r.Code, r.Body)
	}
}

// TestParallelWrongCodesStayWithinTheLimit: 2FA codes cost no hash, so
// nothing but the reservation stops 200 parallel guesses from one address.
func TestParallelWrongCodesStayWithinTheLimit(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newEnvOn(t, engine)
		session := e.setup()
		secret, _ := e.enableTOTP(session, "phone")
		wrong := e.wrongCode(secret)
		peer := "198.51.100.60:1"
		var tokens []string
		for range 4 {
			tokens = append(tokens, e.pendingLogin(peer))
		}
		var wg sync.WaitGroup
		var invalid, limited, other atomic.Int32
		start := make(chan struct{})
		for i := range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r := e.login2FA(tokens[i%len(tokens)], wrong, peer)
				switch {
				case r.Code == 401 && strings.Contains(r.Body.String(), "invalid code"):
					invalid.Add(1)
				case r.Code == 429:
					limited.Add(1)
				default:
					other.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if invalid.Load() > auth.MaxFailures || limited.Load() == 0 {
			t.Fatalf("%d wrong codes were checked (limit %d), %d got 429, %d other", invalid.Load(), auth.MaxFailures, limited.Load(), other.Load())
		}
	})
}

func TestRateLimitedAttemptsAggregated(t *testing.T) {
	e := newEnv(t)
	session := e.setup()
	e.now = time.Unix(1_800_000_000, 0).Truncate(time.Minute).Add(5 * time.Second)
	peer := "198.51.100.70:1"
	for i := 0; i < auth.MaxFailures; i++ {
		e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"wrong"}`, peer: peer})
	}
	for i := 0; i < 20; i++ {
		wantError(t, e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"wrong"}`, peer: peer}), 429, "")
	}
	e.now = e.now.Add(time.Minute)
	for i := 0; i < 3; i++ {
		wantError(t, e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"wrong"}`, peer: peer}), 429, "")
	}
	r := e.do(req{method: "GET", path: "/api/security/logs", cookie: session})
	var body struct {
		Data []store.AuditEntry `json:"data"`
	}
	if err := json.Unmarshal(r.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	var counts []int64
	for _, en := range body.Data {
		if en.Kind == "LOGIN_RATE_LIMITED" {
			if en.ClientAddr != "198.51.100.70" {
				t.Fatalf("row for %q", en.ClientAddr)
			}
			counts = append(counts, en.Count)
		}
	}
	if fmt.Sprint(counts) != "[3 20]" {
		t.Fatalf("LOGIN_RATE_LIMITED rows (newest first) with counts %v, want [3 20]", counts)
	}
}

func TestShadowingSessionCookie(t *testing.T) {
	e := newEnv(t)
	token := e.setup()
	// A sibling subdomain set a parent-domain cookie of the same name,
	// which the browser sends first.
	r := e.do(req{method: "GET", path: "/api/security/logs", header: map[string]string{"Cookie": "tunnel_session=planted; tunnel_session=" + token}})
	if r.Code != 200 {
		t.Fatalf("real session behind a planted cookie: %d %s", r.Code, r.Body)
	}
	st := e.do(req{method: "GET", path: "/api/auth/status", header: map[string]string{"Cookie": "tunnel_session=planted; tunnel_session=" + token}})
	if !strings.Contains(st.Body.String(), `"authenticated":true`) {
		t.Fatalf("status: %s", st.Body)
	}
	wantError(t, e.do(req{method: "GET", path: "/api/security/logs", header: map[string]string{"Cookie": "tunnel_session=planted; tunnel_session=other"}}), 401, "authentication required")
	// Logout ends the real session, whatever comes first.
	e.do(req{method: "POST", path: "/api/auth/logout", header: map[string]string{"Cookie": "tunnel_session=planted; tunnel_session=" + token}})
	wantError(t, e.do(req{method: "GET", path: "/api/security/logs", cookie: token}), 401, "authentication required")
}

// countingTools answers like a box without firewall tools and counts the
// calls.
type countingTools struct{ n atomic.Int32 }

func (c *countingTools) Run(ctx context.Context, name string, args ...string) cmdrun.Result {
	c.n.Add(1)
	return noTools{}.Run(ctx, name, args...)
}

func TestFirewallDetectPublicOnlyUntilSetup(t *testing.T) {
	tools := &countingTools{}
	dir := t.TempDir()
	e := newEnvDeps(t, newTestDB(t, sqliteEngine, dir), dir, nil, app.Deps{Units: &testutil.MemoryUnits{}, HostTools: tools})
	if r := e.do(req{method: "GET", path: "/api/local/firewall/detect"}); r.Code != 200 {
		t.Fatalf("before setup: %d %s", r.Code, r.Body)
	}
	calls := tools.n.Load()
	if calls == 0 {
		t.Fatal("detect ran no tool")
	}
	// Within the cache's lifetime the tools are not asked again.
	for range 5 {
		if r := e.do(req{method: "GET", path: "/api/local/firewall/detect"}); r.Code != 200 {
			t.Fatalf("%d %s", r.Code, r.Body)
		}
	}
	if n := tools.n.Load(); n != calls {
		t.Fatalf("5 more detects ran %d more tool calls, want 0", n-calls)
	}
	e.now = e.now.Add(detectCacheFor + time.Second)
	e.do(req{method: "GET", path: "/api/local/firewall/detect"})
	if n := tools.n.Load(); n != 2*calls {
		t.Fatalf("after the cache expired: %d tool calls, want %d", n, 2*calls)
	}
	session := e.setup()
	wantError(t, e.do(req{method: "GET", path: "/api/local/firewall/detect"}), 401, "authentication required")
	if r := e.do(req{method: "GET", path: "/api/local/firewall/detect", cookie: session}); r.Code != 200 {
		t.Fatalf("after setup with a session: %d %s", r.Code, r.Body)
	}
}

// TestJoinCommandFromValidatedBaseURL: a Host header with shell syntax does
// not reach the command the operator pastes; it is refused and no token is
// made.
func TestJoinCommandFromValidatedBaseURL(t *testing.T) {
	e := newMachinesEnv(t, wide)
	for _, host := range []string{"a$(reboot)", "evil.example;id", "x`id`.example", "host:99999", "a'b"} {
		r := e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{}`, cookie: e.cookie, header: map[string]string{"Host": host}})
		if r.Code != 400 || !strings.Contains(r.Body.String(), "cannot build the join command") {
			t.Fatalf("Host %q: %d %s", host, r.Code, r.Body)
		}
	}
	if n := len(e.list(t, "/api/bootstrap/tokens")); n != 0 {
		t.Fatalf("refused requests left %d tokens", n)
	}
	// The shell would expand an IPv6 URL's brackets: that one comes quoted.
	for host, want := range map[string]string{"vps.example.com": "http://vps.example.com/static/bootstrap.sh", "[2001:db8::5]:7380": "'http://[2001:db8::5]:7380/static/bootstrap.sh'", "203.0.113.5:8080": "http://203.0.113.5:8080/static/bootstrap.sh"} {
		d := e.data(t, e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{}`, cookie: e.cookie, header: map[string]string{"Host": host}}), 200)
		if !strings.HasPrefix(d["command"].(string), "curl -fsSL "+want+" ") {
			t.Fatalf("Host %q: command %q", host, d["command"])
		}
	}
	bad := newMachinesEnvWith(t, sqliteEngine, wide, func(c *config.Config) { c.BaseURL = "https://tunnels.example.org/x?$(id)" })
	if r := bad.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{}`, cookie: bad.cookie}); r.Code != 400 {
		t.Fatalf("bad --base-url: %d %s", r.Code, r.Body)
	}
}
