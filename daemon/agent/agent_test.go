package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

const token = "agent-token-for-tests"

// fakeSys records what the agent asked the machine to do.
type fakeSys struct {
	calls     []string
	state     map[string]string
	applied   []byte
	applyErr  error
	restartEr error
}

func (f *fakeSys) UnitState(context.Context) (map[string]string, error) {
	f.calls = append(f.calls, "state")
	return f.state, nil
}
func (f *fakeSys) Restart(context.Context) error {
	f.calls = append(f.calls, "restart")
	return f.restartEr
}
func (f *fakeSys) ApplyConfig(_ context.Context, c []byte) error {
	f.calls = append(f.calls, "apply")
	if f.applyErr != nil {
		return f.applyErr
	}
	f.applied = c
	return nil
}
func (f *fakeSys) ClientVersion(context.Context) (string, error) { return "0.65.0", nil }
func (f *fakeSys) Monotonic() (time.Duration, error)             { return 100 * time.Second, nil }
func (f *fakeSys) Uninstall(context.Context) error {
	f.calls = append(f.calls, "uninstall")
	return nil
}

// challenge asks srv for a challenge as the daemon does, and checks that
// the answer is signed with token.
func challenge(t *testing.T, srv *agent.Server, token string) string {
	t.Helper()
	nonce := agent.NewNonce()
	req := httptest.NewRequest("GET", "/challenge", nil)
	req.Header.Set(agent.HeaderNonce, nonce)
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	var ch struct {
		Challenge string `json:"challenge"`
	}
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &ch) != nil || ch.Challenge == "" {
		t.Fatalf("GET /challenge: %d %s", rec.Code, rec.Body)
	}
	if !agent.SignatureOK(rec.Header().Get(agent.HeaderSignature), agent.ResponseSignature(token, nonce, 200, rec.Body.Bytes())) {
		t.Fatal("the challenge is not signed with the agent token")
	}
	return ch.Challenge
}

// signed is a request signed the way the daemon signs it.
func signed(method, path, body, token, challenge string) (*http.Request, string) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	nonce := agent.NewNonce()
	req.Header.Set(agent.HeaderChallenge, challenge)
	req.Header.Set(agent.HeaderNonce, nonce)
	req.Header.Set(agent.HeaderSignature, agent.RequestSignature(token, method, path, []byte(body), challenge, nonce))
	return req, nonce
}

func TestEndpoints(t *testing.T) {
	cases := []struct {
		name, method, path, body string
		// how the request differs from the daemon's: "" (it does not),
		// "unsigned", "bearer" (the token itself, as before), "wrong
		// token", "body changed", "path changed", "replayed", "old
		// challenge", "challenge of another agent process"
		tamper string
		sys    fakeSys
		status int
		want   string // substring of the body
		calls  string
	}{
		{name: "unsigned", tamper: "unsigned", method: "GET", path: "/status", status: 401, want: "signed with the agent token is required"},
		{name: "the token itself", tamper: "bearer", method: "POST", path: "/restart", status: 401, want: "signed with the agent token is required"},
		{name: "wrong token does not restart", tamper: "wrong token", method: "POST", path: "/restart", status: 401},
		{name: "wrong token does not uninstall", tamper: "wrong token", method: "POST", path: "/uninstall", status: 401},
		{name: "body changed on the way", tamper: "body changed", method: "PUT", path: "/config", body: "serverAddr = 'x'\n", status: 401},
		{name: "path changed on the way", tamper: "path changed", method: "POST", path: "/restart", status: 401},
		{name: "replayed restart", tamper: "replayed", method: "POST", path: "/restart", status: 401, want: "used already", calls: "restart"},
		{name: "old challenge", tamper: "old challenge", method: "GET", path: "/status", status: 401, want: "older than 30s"},
		{name: "challenge of a previous agent process", tamper: "other process", method: "POST", path: "/uninstall", status: 401, want: "not issued by this agent"},
		{name: "status", method: "GET", path: "/status",
			sys:    fakeSys{state: map[string]string{"ActiveState": "active", "SubState": "running", "ActiveEnterTimestampMonotonic": "40000000"}},
			status: 200, want: `"uptime_seconds":60`, calls: "state"},
		{name: "status inactive", method: "GET", path: "/status",
			sys:    fakeSys{state: map[string]string{"ActiveState": "failed", "SubState": "failed"}},
			status: 200, want: `"active_state":"failed"`, calls: "state"},
		{name: "restart", method: "POST", path: "/restart", status: 202, want: "revtunnel-client.service restart started", calls: "restart"},
		{name: "config", method: "PUT", path: "/config", body: "serverAddr = 'x'\n", status: 200, want: "reloaded", calls: "apply"},
		{name: "empty config", method: "PUT", path: "/config", body: " \n", status: 400, want: "installed one is kept"},
		{name: "refused config", method: "PUT", path: "/config", body: "junk",
			sys:    fakeSys{applyErr: fmt.Errorf("%w: frpc verify: toml: bad", agent.ErrRefused)},
			status: 400, want: "toml: bad; the installed config is kept", calls: "apply"},
		{name: "too big", method: "PUT", path: "/config", body: strings.Repeat("#", agent.MaxConfigBytes+1), status: 413},
		{name: "uninstall", method: "POST", path: "/uninstall", status: 202, want: "uninstall started", calls: "uninstall"},
		{name: "wrong method", method: "GET", path: "/restart", status: 405},
		{name: "unknown path", method: "GET", path: "/etc/passwd", status: 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sys := c.sys
			now := time.Unix(1_800_000_000, 0)
			srv := &agent.Server{Token: token, Unit: "revtunnel-client.service", Version: "v1", Sys: &sys,
				Later: func(f func()) { f() }, Now: func() time.Time { return now }}
			key := token
			if c.tamper == "wrong token" {
				key = "another-machines-token"
			}
			ch := challenge(t, srv, token)
			if c.tamper == "other process" {
				// An agent restarted since it gave that challenge.
				ch = challenge(t, &agent.Server{Token: token, Sys: &fakeSys{}}, token)
			}
			req, nonce := signed(c.method, c.path, c.body, key, ch)
			switch c.tamper {
			case "unsigned":
				req = httptest.NewRequest(c.method, c.path, nil)
			case "bearer":
				req = httptest.NewRequest(c.method, c.path, nil)
				req.Header.Set("Authorization", "Bearer "+token)
			case "body changed":
				req.Body = io.NopCloser(strings.NewReader("serverAddr = 'evil'\n"))
			case "path changed":
				req.URL.Path, req.RequestURI = "/uninstall", "/uninstall"
			case "replayed":
				first := req.Clone(req.Context())
				srv.ServeHTTP(httptest.NewRecorder(), first)
			case "old challenge":
				now = now.Add(agent.ChallengeLifetime + time.Second)
			}
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.want) {
				t.Fatalf("%s %s: %d %s, want %d containing %q", c.method, c.path, rec.Code, rec.Body, c.status, c.want)
			}
			if got := strings.Join(sys.calls, ","); got != c.calls {
				t.Fatalf("calls %q, want %q", got, c.calls)
			}
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("not JSON: %s", rec.Body)
			}
			if c.name == "config" && string(sys.applied) != c.body {
				t.Fatalf("applied %q", sys.applied)
			}
			// Every answer to a request signed with the token is signed back.
			sig := rec.Header().Get(agent.HeaderSignature)
			good := agent.SignatureOK(sig, agent.ResponseSignature(token, nonce, rec.Code, rec.Body.Bytes()))
			if wantSigned := c.tamper == "" && c.status != 413 || c.tamper == "replayed" || c.tamper == "old challenge" || c.tamper == "other process"; good != wantSigned {
				t.Fatalf("answer signed: %v, want %v (%q)", good, wantSigned, sig)
			}
		})
	}
}

const goodConfig = `serverAddr = "127.0.0.1"
serverPort = 7000
[[proxies]]
name = "ssh"
type = "tcp"
localIP = "127.0.0.1"
localPort = 22
remotePort = 20001
`

// TestApplierRealFRPC runs the real frpc verify: a bad config is refused
// with frpc's words and the installed file is untouched; a good one is
// installed and reloaded; a failed reload puts the previous file back.
func TestApplierRealFRPC(t *testing.T) {
	_, frpc := testutil.FRP()
	dir := t.TempDir()
	path := filepath.Join(dir, "client.toml")
	if err := os.WriteFile(path, []byte(goodConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	reloads := 0
	var reloadErr error
	a := agent.Applier{FRPC: frpc, Path: path, Reload: func(context.Context) (string, error) {
		reloads++
		if reloadErr != nil {
			return "reload failed: connection refused", reloadErr
		}
		return "reload success", nil
	}}
	ctx := context.Background()

	// Of the allowed shape, but frpc's own checks refuse it.
	bad := strings.Replace(goodConfig, "[[proxies]]", "[transport]\nheartbeatInterval = 60\nheartbeatTimeout = 10\n[[proxies]]", 1)
	err := a.Apply(ctx, []byte(bad))
	if !errors.Is(err, agent.ErrRefused) || !strings.Contains(err.Error(), "frpc verify: ") || !strings.Contains(err.Error(), "heartbeat timeout") {
		t.Fatalf("bad config: %v, want refused in frpc's words", err)
	}
	assertFile(t, path, goodConfig)
	if reloads != 0 {
		t.Fatal("reloaded after a refused config")
	}

	// The installed file is root:revtunnel 0640 on a machine (frpc reads it
	// as revtunnel); the new one keeps that owner, group and mode.
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		gid = 65534
		if err := os.Chown(path, 0, gid); err != nil {
			t.Fatal(err)
		}
	}
	newer := strings.Replace(goodConfig, "20001", "20002", 1)
	if err := a.Apply(ctx, []byte(newer)); err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, newer)
	st, _ := os.Stat(path)
	if sys := st.Sys().(*syscall.Stat_t); st.Mode().Perm() != 0o640 || int(sys.Uid) != uid || int(sys.Gid) != gid || reloads != 1 {
		t.Fatalf("mode %v owner %d:%d (want 0640 %d:%d), reloads %d", st.Mode(), sys.Uid, sys.Gid, uid, gid, reloads)
	}

	reloadErr = errors.New("exit status 1")
	err = a.Apply(ctx, []byte(goodConfig))
	if err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "previous config is back") {
		t.Fatalf("failed reload: %v", err)
	}
	assertFile(t, path, newer)
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}
}

func assertFile(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Fatalf("%s = %q (%v), want %q", path, got, err, want)
	}
}
