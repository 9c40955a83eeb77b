package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

func TestEndpoints(t *testing.T) {
	cases := []struct {
		name, method, path, auth, body string
		sys                            fakeSys
		status                         int
		want                           string // substring of the body
		calls                          string
	}{
		{name: "no token", method: "GET", path: "/status", status: 401, want: "agent token required"},
		{name: "wrong token", method: "GET", path: "/status", auth: "Bearer nope", status: 401, want: "agent token required"},
		{name: "token as basic auth", method: "POST", path: "/restart", auth: "Basic " + token, status: 401},
		{name: "wrong token does not restart", method: "POST", path: "/restart", auth: "Bearer " + token + "x", status: 401},
		{name: "wrong token does not uninstall", method: "POST", path: "/uninstall", auth: "Bearer x", status: 401},
		{name: "status", method: "GET", path: "/status", auth: "Bearer " + token,
			sys:    fakeSys{state: map[string]string{"ActiveState": "active", "SubState": "running", "ActiveEnterTimestampMonotonic": "40000000"}},
			status: 200, want: `"uptime_seconds":60`, calls: "state"},
		{name: "status inactive", method: "GET", path: "/status", auth: "Bearer " + token,
			sys:    fakeSys{state: map[string]string{"ActiveState": "failed", "SubState": "failed"}},
			status: 200, want: `"active_state":"failed"`, calls: "state"},
		{name: "restart", method: "POST", path: "/restart", auth: "Bearer " + token, status: 202, want: "revtunnel-client.service restart started", calls: "restart"},
		{name: "config", method: "PUT", path: "/config", auth: "Bearer " + token, body: "serverAddr = 'x'\n", status: 200, want: "reloaded", calls: "apply"},
		{name: "empty config", method: "PUT", path: "/config", auth: "Bearer " + token, body: " \n", status: 400, want: "installed one is kept"},
		{name: "refused config", method: "PUT", path: "/config", auth: "Bearer " + token, body: "junk",
			sys:    fakeSys{applyErr: fmt.Errorf("%w: frpc verify: toml: bad", agent.ErrRefused)},
			status: 400, want: "toml: bad; the installed config is kept", calls: "apply"},
		{name: "too big", method: "PUT", path: "/config", auth: "Bearer " + token, body: strings.Repeat("#", agent.MaxConfigBytes+1), status: 413},
		{name: "uninstall", method: "POST", path: "/uninstall", auth: "Bearer " + token, status: 202, want: "uninstall started", calls: "uninstall"},
		{name: "wrong method", method: "GET", path: "/restart", auth: "Bearer " + token, status: 405},
		{name: "unknown path", method: "GET", path: "/etc/passwd", auth: "Bearer " + token, status: 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sys := c.sys
			srv := &agent.Server{Token: token, Unit: "revtunnel-client.service", Version: "v1", Sys: &sys, Later: func(f func()) { f() }}
			req := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
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
