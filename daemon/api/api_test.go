package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/sshkeys"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/totp"
)

const goodPassword = "correct horse battery staple"

type testEnv struct {
	t       testing.TB
	app     *app.App // the daemon as Serve builds it
	srv     *Server
	db      testDB // the database st is a handle on
	st      *store.Store
	cfg     *config.Config
	authSvc *auth.Service
	totp    *totp.Service
	sshkeys *sshkeys.Service
	now     time.Time
}

// The engines the store runs on, as store.(*Store).Engine names them.
const (
	sqliteEngine   = "sqlite"
	postgresEngine = "postgres"
)

// eachEngine runs fn as two subtests, "sqlite" and "postgres", each with
// the engine to build its environment on (newEnvOn and friends). Tests that
// exercise the store's queries and transactions use it, so that every one
// the API makes runs on PostgreSQL too; the others stay on SQLite alone.
func eachEngine(t *testing.T, fn func(t *testing.T, engine string)) {
	t.Helper()
	for _, engine := range []string{sqliteEngine, postgresEngine} {
		t.Run(engine, func(t *testing.T) { fn(t, engine) })
	}
}

// testDB is the database of a test environment: SQLite in dir, or the
// PostgreSQL database at url.
type testDB struct{ dir, url string }

// newTestDB makes a fresh database on engine: SQLite in dir, or a new
// empty database on the test PostgreSQL.
func newTestDB(t testing.TB, engine, dir string) testDB {
	t.Helper()
	switch engine {
	case sqliteEngine:
		return testDB{dir: dir}
	case postgresEngine:
		return testDB{dir: dir, url: testutil.PostgresURLFrom(t, "api_migrated", migratePostgres)}
	}
	t.Fatalf("unknown engine %q", engine)
	return testDB{}
}

// migratePostgres migrates the PostgreSQL database at url, which every
// test's database is then copied from: cheaper than each test running the
// migrations.
func migratePostgres(url string) error {
	dir, err := os.MkdirTemp("", "tunnelsvc-api-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := store.OpenDatabase(context.Background(), dir, url)
	if err != nil {
		return err
	}
	return st.Close()
}

// open opens a handle on the database, closed when the test ends. Two
// handles are two processes on one database, as the daemon and an admin
// command are.
func (d testDB) open(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.OpenDatabase(context.Background(), d.dir, d.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// newEnv builds a server on a fresh SQLite store; opts adjust its Options.
func newEnv(t testing.TB, opts ...func(*Options, *store.Store)) *testEnv {
	t.Helper()
	return newEnvOn(t, sqliteEngine, opts...)
}

// newEnvOn is newEnv on a fresh store of the given engine.
func newEnvOn(t testing.TB, engine string, opts ...func(*Options, *store.Store)) *testEnv {
	t.Helper()
	dir := t.TempDir()
	return newEnvWith(t, newTestDB(t, engine, dir), dir, opts...)
}

// newEnvIn is newEnv with the SQLite store in storeDir and the configured
// data directory (the key file, the setup code) at dataDir.
func newEnvIn(t testing.TB, storeDir, dataDir string, opts ...func(*Options, *store.Store)) *testEnv {
	t.Helper()
	return newEnvWith(t, newTestDB(t, sqliteEngine, storeDir), dataDir, opts...)
}

// newEnvWith builds the daemon as Serve does (app.New; nothing started),
// its database db, its data directory dataDir, with test doubles only for
// what is outside the process: the clock (e.now), systemd and the network
// tools. opts replace parts of the API's Options for the tests that need a
// stand-in of their own.
func newEnvWith(t testing.TB, db testDB, dataDir string, opts ...func(*Options, *store.Store)) *testEnv {
	t.Helper()
	return newEnvConfigured(t, db, dataDir, nil, opts...)
}

// newEnvConfigured is newEnvWith with the daemon's configuration changed
// by edit (when not nil) before the daemon is built, as flags would.
func newEnvConfigured(t testing.TB, db testDB, dataDir string, edit func(*config.Config), opts ...func(*Options, *store.Store)) *testEnv {
	t.Helper()
	return newEnvDeps(t, db, dataDir, edit, app.Deps{Units: &testutil.MemoryUnits{}}, opts...)
}

// newEnvDeps is newEnvConfigured with the stand-ins deps (the clock is
// always e.now; the network tools default to testutil.NoHostTools).
func newEnvDeps(t testing.TB, db testDB, dataDir string, edit func(*config.Config), deps app.Deps, opts ...func(*Options, *store.Store)) *testEnv {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir, cfg.Database, cfg.SystemRoot = dataDir, db.url, t.TempDir()
	// The tunnel server's configs are checked by the real frps.
	frps, _ := testutil.FRP()
	cfg.BinDir = filepath.Dir(frps)
	if edit != nil {
		edit(&cfg)
	}
	if db.url == "" && db.dir != dataDir {
		t.Fatalf("the daemon keeps its SQLite database in its data directory (%s), not in %s", dataDir, db.dir)
	}
	e := &testEnv{t: t, db: db, cfg: &cfg, now: time.Unix(1_800_000_000, 0)}
	clock := func() time.Time { return e.now }
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	deps.Now = clock
	if deps.HostTools == nil {
		deps.HostTools = testutil.NoHostTools{}
	}
	a, err := app.New(context.Background(), &cfg, log, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	e.app, e.st, e.authSvc, e.totp, e.sshkeys = a, a.Store, a.Auth, a.TOTP, a.SSHKeys
	o := optionsFor(a)
	for _, opt := range opts {
		opt(&o, e.st)
	}
	e.srv = New(o)
	return e
}

type req struct {
	method, path, body string
	peer               string // RemoteAddr; default 127.0.0.1:40000
	header             map[string]string
	cookie             string
}

type resp struct {
	*httptest.ResponseRecorder
}

func (r resp) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body.Bytes(), &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.Body.String(), err)
	}
	return m
}

func (e *testEnv) do(q req) resp {
	var body io.Reader
	if q.body != "" {
		body = strings.NewReader(q.body)
	}
	r := httptest.NewRequest(q.method, q.path, body)
	r.RemoteAddr = "127.0.0.1:40000"
	if q.peer != "" {
		r.RemoteAddr = q.peer
	}
	r.Host = "127.0.0.1:7380"
	for k, v := range q.header {
		if k == "Host" {
			r.Host = v
			continue
		}
		r.Header.Set(k, v)
	}
	if q.cookie != "" {
		r.AddCookie(&http.Cookie{Name: SessionCookie, Value: q.cookie})
	}
	w := httptest.NewRecorder()
	checkedHandler(e.t, e.srv).ServeHTTP(w, r)
	return resp{w}
}

func sessionCookie(t testing.TB, r resp) *http.Cookie {
	t.Helper()
	for _, c := range r.Result().Cookies() {
		if c.Name == SessionCookie {
			return c
		}
	}
	return nil
}

// setup configures the service and returns the session token.
func (e *testEnv) setup() string {
	e.t.Helper()
	r := e.do(req{method: "POST", path: "/api/auth/setup", body: `{"password":"` + goodPassword + `"}`})
	if r.Code != 200 {
		e.t.Fatalf("setup: %d %s", r.Code, r.Body)
	}
	return sessionCookie(e.t, r).Value
}

func wantError(t *testing.T, r resp, status int, msg string) {
	t.Helper()
	if r.Code != status {
		t.Fatalf("status = %d, want %d; body %s", r.Code, status, r.Body)
	}
	got, _ := r.json(t)["error"].(string)
	if msg != "" && got != msg {
		t.Fatalf("error = %q, want %q", got, msg)
	}
	if got == "" {
		t.Fatalf("error body has no message: %s", r.Body)
	}
}

func TestStatusFresh(t *testing.T) {
	e := newEnv(t)
	r := e.do(req{method: "GET", path: "/api/auth/status"})
	if r.Code != 200 || strings.TrimSpace(r.Body.String()) != `{"data":{"authenticated":false,"passkey_login":false,"password_login":true,"setup":false,"totp_enabled":false}}` {
		t.Fatalf("%d %s", r.Code, r.Body)
	}
}

func TestSetupValidation(t *testing.T) {
	cases := []struct {
		name, body string
		status     int
		msg        string
	}{
		{"not json", `{"password":`, 400, "invalid request body"},
		{"empty body", ``, 400, "invalid request body"},
		{"trailing garbage", `{"password":"x"} x`, 400, "invalid request body"},
		{"wrong type", `{"password":5}`, 400, "invalid request body"},
		{"short", `{"password":"Zq9!x"}`, 400, "password must be at least 8 characters"},
		{"too long", `{"password":"` + strings.Repeat("Zq9!x", 210) + `"}`, 400, "password must be at most 1024 bytes"},
		{"common", `{"password":"password123"}`, 400, "password is too easy to guess: use a longer passphrase of unrelated words"},
		{"keyboard walk", `{"password":"qwertyuiop"}`, 400, "password is too easy to guess: use a longer passphrase of unrelated words"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			wantError(t, e.do(req{method: "POST", path: "/api/auth/setup", body: c.body}), c.status, c.msg)
			if ok, _ := e.authSvc.Configured(context.Background()); ok {
				t.Fatal("a rejected setup configured the service")
			}
		})
	}
}

func TestSetupLogsInAndConflicts(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newEnvOn(t, engine)
		r := e.do(req{method: "POST", path: "/api/auth/setup", body: `{"password":"` + goodPassword + `"}`})
		if r.Code != 200 || r.json(t)["data"].(map[string]any)["message"] != "setup complete" {
			t.Fatalf("%d %s", r.Code, r.Body)
		}
		c := sessionCookie(t, r)
		if c == nil || c.Value == "" || c.MaxAge != 86400 || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/" || c.Secure {
			t.Fatalf("cookie = %+v", c)
		}
		st := e.do(req{method: "GET", path: "/api/auth/status", cookie: c.Value})
		if strings.TrimSpace(st.Body.String()) != `{"data":{"authenticated":true,"passkey_login":false,"password_login":true,"setup":true,"totp_enabled":false}}` {
			t.Fatal(st.Body)
		}
		wantError(t, e.do(req{method: "POST", path: "/api/auth/setup", body: `{"password":"another fine passphrase here"}`}), 409, "already configured")
		// The password did not change.
		if r := e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`}); r.Code != 200 {
			t.Fatalf("login after 409: %d %s", r.Code, r.Body)
		}
	})
}

func TestSecureCookie(t *testing.T) {
	e := newEnv(t)
	e.setup()
	r := e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`, header: map[string]string{"X-Forwarded-Proto": "https"}})
	if c := sessionCookie(t, r); c == nil || !c.Secure {
		t.Fatalf("X-Forwarded-Proto https: cookie %+v", c)
	}
	r = e.do(req{method: "POST", path: "/api/auth/logout", header: map[string]string{"X-Forwarded-Proto": "https"}})
	if got := r.Header().Get("Set-Cookie"); got != "tunnel_session=; Path=/; Max-Age=-1; HttpOnly; SameSite=Lax; Secure" {
		t.Fatalf("logout cookie %q", got)
	}
}

func TestSetupCodeOffLoopback(t *testing.T) {
	e := newEnv(t)
	code, _, err := auth.LoadOrCreateSetupCode(e.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"password":"` + goodPassword + `"}`
	remote := "203.0.113.9:5000"
	r := e.do(req{method: "POST", path: "/api/auth/setup", body: body, peer: remote})
	wantError(t, r, 403, auth.ErrSetupCodeRequired.Error())
	if !strings.Contains(r.Body.String(), "tunnelsvc setup-code") {
		t.Fatalf("403 does not say where the code is: %s", r.Body)
	}
	wantError(t, e.do(req{method: "POST", path: "/api/auth/setup", body: body, peer: remote, header: map[string]string{"X-Setup-Code": "WRONG"}}), 403, "")
	// A local peer reached by a DNS name (DNS rebinding) needs the code too.
	wantError(t, e.do(req{method: "POST", path: "/api/auth/setup", body: body, header: map[string]string{"Host": "attacker.example"}}), 403, "")
	// X-Forwarded-For from a non-local peer is not believed.
	wantError(t, e.do(req{method: "POST", path: "/api/auth/setup", body: body, peer: remote, header: map[string]string{"X-Forwarded-For": "127.0.0.1"}}), 403, "")
	// Through the local proxy, the forwarded remote client needs the code.
	wantError(t, e.do(req{method: "POST", path: "/api/auth/setup", body: body, header: map[string]string{"X-Forwarded-For": "127.0.0.1, 198.51.100.7"}}), 403, "")

	r = e.do(req{method: "POST", path: "/api/auth/setup", body: body, peer: remote, header: map[string]string{"X-Setup-Code": code}})
	if r.Code != 200 || sessionCookie(t, r) == nil {
		t.Fatalf("setup with the code: %d %s", r.Code, r.Body)
	}
	if _, err := auth.ReadSetupCode(e.cfg.DataDir); err == nil {
		t.Fatal("setup code still on disk after setup")
	}
}

func TestLoginAndRateLimit(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"whatever it is"}`}), 401, "invalid password")
	e.setup()
	wantError(t, e.do(req{method: "POST", path: "/api/auth/login", body: `nope`}), 400, "invalid request body")
	peer := "198.51.100.20:1000"
	for i := 0; i < auth.MaxFailures-1; i++ {
		e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"wrong"}`, peer: peer})
	}
	// A success resets the count.
	if r := e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`, peer: peer}); r.Code != 200 {
		t.Fatalf("login: %d %s", r.Code, r.Body)
	}
	for i := 0; i < auth.MaxFailures; i++ {
		wantError(t, e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"wrong"}`, peer: peer}), 401, "invalid password")
	}
	e.now = e.now.Add(time.Minute)
	r := e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`, peer: peer})
	wantError(t, r, 429, "too many attempts; try again later (in 240 seconds)")
	if r.Header().Get("Retry-After") != "240" {
		t.Fatalf("Retry-After = %q", r.Header().Get("Retry-After"))
	}
	// Another address is unaffected.
	if r := e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`, peer: "198.51.100.21:1"}); r.Code != 200 {
		t.Fatalf("other address: %d", r.Code)
	}
	// After the window the address may try again.
	e.now = e.now.Add(4 * time.Minute)
	if r := e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`, peer: peer}); r.Code != 200 {
		t.Fatalf("after the window: %d %s", r.Code, r.Body)
	}
}

func TestProtectedRouteAndLogout(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newEnvOn(t, engine)
		token := e.setup()
		wantError(t, e.do(req{method: "GET", path: "/api/security/logs"}), 401, "authentication required")
		wantError(t, e.do(req{method: "GET", path: "/api/security/logs", cookie: "forged"}), 401, "authentication required")
		if r := e.do(req{method: "GET", path: "/api/security/logs", cookie: token}); r.Code != 200 {
			t.Fatalf("%d %s", r.Code, r.Body)
		}
		r := e.do(req{method: "POST", path: "/api/auth/logout", cookie: token})
		if r.Code != 200 || r.json(t)["data"].(map[string]any)["message"] != "logged out" {
			t.Fatalf("%d %s", r.Code, r.Body)
		}
		if got := r.Header().Get("Set-Cookie"); got != "tunnel_session=; Path=/; Max-Age=-1; HttpOnly; SameSite=Lax" {
			t.Fatalf("logout Set-Cookie = %q", got)
		}
		wantError(t, e.do(req{method: "GET", path: "/api/security/logs", cookie: token}), 401, "authentication required")
		// Logout without a cookie is still 200.
		if r := e.do(req{method: "POST", path: "/api/auth/logout"}); r.Code != 200 {
			t.Fatal(r.Code)
		}
		// Sessions expire after 86400 s.
		token = sessionCookie(t, e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`})).Value
		e.now = e.now.Add(86400 * time.Second)
		wantError(t, e.do(req{method: "GET", path: "/api/security/logs", cookie: token}), 401, "authentication required")
	})
}

func TestAuditLog(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newEnvOn(t, engine)
		token := e.setup()
		e.now = e.now.Add(time.Second)
		e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"nope"}`, peer: "198.51.100.9:1", header: map[string]string{"User-Agent": "ua-test"}})
		e.now = e.now.Add(time.Second)
		e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`, header: map[string]string{"X-Forwarded-For": "192.0.2.44"}})
		e.now = e.now.Add(time.Second)
		r := e.do(req{method: "GET", path: "/api/security/logs", cookie: token})
		var body struct {
			Data []store.AuditEntry `json:"data"`
		}
		json.Unmarshal(r.Body.Bytes(), &body)
		var kinds []string
		for _, en := range body.Data {
			kinds = append(kinds, en.Kind+"@"+en.ClientAddr)
		}
		want := "LOGIN_SUCCESS@192.0.2.44 LOGIN_FAILED@198.51.100.9 SETUP@127.0.0.1"
		if strings.Join(kinds, " ") != want {
			t.Fatalf("audit = %v, want %s", kinds, want)
		}
		if body.Data[1].UserAgent != "ua-test" {
			t.Fatalf("user agent = %q", body.Data[1].UserAgent)
		}
	})
}

func TestEnvelopeEdges(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(req{method: "GET", path: "/api/does-not-exist"}), 404, "not found")
	wantError(t, e.do(req{method: "DELETE", path: "/api/auth/status"}), 405, "method not allowed")
	big := `{"password":"` + strings.Repeat("a", MaxBodyBytes) + `"}`
	wantError(t, e.do(req{method: "POST", path: "/api/auth/login", body: big}), 413, "")
	// A browser's cross-site POST is refused; curl (no such headers) is not.
	wantError(t, e.do(req{method: "POST", path: "/api/auth/logout", header: map[string]string{"Sec-Fetch-Site": "cross-site"}}), 403, "cross-origin request refused")
	wantError(t, e.do(req{method: "POST", path: "/api/auth/logout", header: map[string]string{"Origin": "https://evil.example", "Host": "example.com"}}), 403, "")
	if r := e.do(req{method: "POST", path: "/api/auth/logout", header: map[string]string{"Sec-Fetch-Site": "same-origin"}}); r.Code != 200 {
		t.Fatalf("same-origin logout: %d", r.Code)
	}
	if r := e.do(req{method: "GET", path: "/healthz"}); r.Code != 200 {
		t.Fatalf("healthz: %d", r.Code)
	}
	if r := e.do(req{method: "GET", path: "/api/openapi.yaml"}); r.Code != 200 || !strings.HasPrefix(r.Body.String(), "openapi: 3") {
		t.Fatalf("openapi: %d", r.Code)
	}
}

func TestClientAddrRule(t *testing.T) {
	isLocal := func(a netip.Addr) bool { return a.IsLoopback() }
	cases := []struct{ peer, xff, want string }{
		{"127.0.0.1:1", "", "127.0.0.1"},
		{"127.0.0.1:1", "10.0.0.1, 203.0.113.5", "203.0.113.5"},
		{"127.0.0.1:1", "garbage", "127.0.0.1"},
		{"203.0.113.9:1", "127.0.0.1", "203.0.113.9"},
		{"[::1]:1", "2001:db8::1", "2001:db8::1"},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		if got := auth.ClientAddr(r, isLocal).String(); got != c.want {
			t.Errorf("peer %s xff %q: got %s want %s", c.peer, c.xff, got, c.want)
		}
	}
}
