package api

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/bundle"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

func staticEnv(t *testing.T, baseURL string) (*testEnv, string) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "agents"), 0o755)
	os.WriteFile(filepath.Join(dir, "agents", "tunnel-agent-linux-amd64"), []byte("\x7fELF agent"), 0o755)
	os.WriteFile(filepath.Join(dir, "agents", "tunnel-agent-linux-amd64.sha256"), []byte("abc  tunnel-agent-linux-amd64\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("not served"), 0o644)
	data := t.TempDir()
	e := newEnvConfigured(t, newTestDB(t, sqliteEngine, data), data, func(c *config.Config) {
		c.StaticDir, c.BaseURL = dir, baseURL
	}, func(o *Options, _ *store.Store) {
		o.UI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("the SPA")) })
	})
	return e, dir
}

func TestStaticBootstrapBaseURL(t *testing.T) {
	cases := []struct {
		name, base, peer string
		header           map[string]string
		want             string
	}{
		{name: "from the request", header: map[string]string{"Host": "vps.example:7380"}, want: "BASE_URL='http://vps.example:7380'"},
		{name: "forwarded https from the local proxy", header: map[string]string{"Host": "vps.example", "X-Forwarded-Proto": "https"}, want: "BASE_URL='https://vps.example'"},
		{name: "forwarded https from elsewhere is ignored", peer: "203.0.113.9:5000", header: map[string]string{"Host": "vps.example", "X-Forwarded-Proto": "https"}, want: "BASE_URL='http://vps.example'"},
		{name: "--base-url wins", base: "https://tunnels.example.org", header: map[string]string{"Host": "other"}, want: "BASE_URL='https://tunnels.example.org'"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, _ := staticEnv(t, c.base)
			r := e.do(req{method: "GET", path: "/static/bootstrap.sh", peer: c.peer, header: c.header})
			if r.Code != 200 || !strings.Contains(r.Body.String(), c.want) || strings.Contains(r.Body.String(), "{base_url}") {
				t.Fatalf("%d, want a script with %s and no placeholder left:\n%.400s", r.Code, c.want, r.Body)
			}
			if !strings.HasPrefix(r.Body.String(), "#!/usr/bin/env bash") || !strings.Contains(r.Header().Get("Content-Type"), "shellscript") {
				t.Fatalf("not a script: %s %.60q", r.Header().Get("Content-Type"), r.Body)
			}
		})
	}
	e, _ := staticEnv(t, "")
	r := e.do(req{method: "GET", path: "/static/bootstrap.sh", header: map[string]string{"Host": "x';rm -rf /;'"}})
	wantError(t, r, 400, "")
	if !strings.Contains(r.Body.String(), "--base-url") {
		t.Fatalf("bad host: %s", r.Body)
	}
}

func TestStaticFiles(t *testing.T) {
	e, _ := staticEnv(t, "")
	cases := []struct {
		path   string
		status int
		want   string
	}{
		{"/static/tunnel-uninstall.sh", 200, "self-delete"},
		{"/static/agents/tunnel-agent-linux-amd64", 200, "\x7fELF agent"},
		{"/static/agents/tunnel-agent-linux-amd64.sha256", 200, "abc  tunnel-agent-linux-amd64"},
		{"/static/agents/tunnel-agent-linux-arm64", 404, "make build"},
		{"/static/revtunnel/revtunnel-client-linux-arm", 404, "make build"},
		{"/static/revtunnel/revtunnel-client-linux-arm.sha256", 404, "make build"},
		{"/static/agents/tunnel-agent-linux-mips", 404, "no such file"},
		{"/static/agents/..%2fsecret.txt", 301, ""}, // cleaned and redirected, never served
		{"/static/secret.txt", 200, "the SPA"},      // not a served file: the SPA answers, never the directory
	}
	for _, c := range cases {
		r := e.do(req{method: "GET", path: c.path})
		if r.Code != c.status || !strings.Contains(r.Body.String(), c.want) || strings.Contains(r.Body.String(), "not served") {
			t.Errorf("GET %s: %d %.200q, want %d containing %q", c.path, r.Code, r.Body, c.status, c.want)
		}
	}
}

type fakeAgents struct {
	err error
}

func (f fakeAgents) Status(_ context.Context, id int64) (any, error) {
	if f.err != nil {
		return nil, f.err
	}
	return map[string]any{"unit": "revtunnel-client.service", "active_state": "active"}, nil
}

func (f fakeAgents) RestartTunnel(_ context.Context, id int64) (string, error) {
	if f.err != nil {
		return "", f.err
	}
	return "revtunnel-client.service restarted", nil
}

func TestAgentRoutes(t *testing.T) {
	cases := []struct {
		name         string
		err          error
		method, path string
		status       int
		want         string
	}{
		{"status", nil, "GET", "/api/machines/3/agent/status", 200, `"active_state":"active"`},
		{"restart", nil, "POST", "/api/machines/3/agent/restart-tunnel", 200, "restarted"},
		{"unknown machine", store.ErrNotFound, "GET", "/api/machines/3/agent/status", 404, "machine not found"},
		{"bad id", nil, "GET", "/api/machines/x/agent/status", 404, "machine not found"},
		{"offline", &agentclient.UnreachableError{MachineID: 3, Err: context.DeadlineExceeded}, "POST", "/api/machines/3/agent/restart-tunnel", 502, "not reachable"},
		{"someone else on the port", &agentclient.NotAgentError{MachineID: 3, Port: 20002, Status: 200, Said: "hi"}, "GET", "/api/machines/3/agent/status", 502, "is not its agent"},
		{"another uid on the port", &agentclient.UnprovenListenerError{MachineID: 3, Port: 20002, UID: 65534, ServerUID: 61234}, "POST", "/api/machines/3/agent/restart-tunnel", 502, "another program (uid 65534) holds the agent port 20002"},
		{"agent refuses", &agentclient.AgentError{Status: 500, Msg: "could not restart: Job failed"}, "POST", "/api/machines/3/agent/restart-tunnel", 502, "Job failed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, func(o *Options, _ *store.Store) { o.Agents = fakeAgents{err: c.err} })
			session := e.setup()
			if r := e.do(req{method: c.method, path: c.path}); r.Code != 401 {
				t.Fatalf("without a session: %d", r.Code)
			}
			r := e.do(req{method: c.method, path: c.path, cookie: session})
			if r.Code != c.status || !strings.Contains(r.Body.String(), c.want) {
				t.Fatalf("%d %s, want %d containing %q", r.Code, r.Body, c.status, c.want)
			}
		})
	}
}

func TestStaticBundles(t *testing.T) {
	e, dir := staticEnv(t, "")
	get := func(path string) (int, string) {
		r := e.do(req{method: "GET", path: path})
		return r.Code, r.Body.String()
	}
	// Before `make build` wrote VERSION and the binaries: what to do.
	if code, body := get("/static/bundles/machine-linux-amd64.tar.gz"); code != 404 || !strings.Contains(body, "make build") {
		t.Errorf("without inputs: %d %s", code, body)
	}
	if code, body := get("/static/bundles/VERSION"); code != 404 || !strings.Contains(body, "VERSION does not exist") {
		t.Errorf("VERSION without the file: %d %s", code, body)
	}
	os.MkdirAll(filepath.Join(dir, "revtunnel"), 0o755)
	os.WriteFile(filepath.Join(dir, "revtunnel", "revtunnel-client-linux-amd64"), []byte("\x7fELF client"), 0o755)
	os.WriteFile(filepath.Join(dir, "VERSION"), []byte("2.0.0\n"), 0o644)
	b, err := bundle.Build(dir, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path   string
		status int
		want   string
	}{
		{"/static/bundles/machine-linux-amd64.tar.gz", 200, string(b.Data)},
		{"/static/bundles/machine-linux-amd64.tar.gz.sha256", 200, b.SHA256 + "  machine-linux-amd64.tar.gz\n"},
		{"/static/bundles/VERSION", 200, "2.0.0\n"},
		{"/static/bundles/machine-linux-arm64.tar.gz", 404, "tunnel-agent-linux-arm64 does not exist"},
		{"/static/bundles/machine-linux-arm.tar.gz", 404, "bundles exist for linux-amd64 and linux-arm64"},
		{"/static/units/revtunnel-client.service", 200, bundle.ClientUnit()},
		{"/static/units/tunnel-agent.service", 200, bundle.AgentUnit()},
		{"/static/units/sudoers-tunnel-agent", 200, bundle.AgentSudoers()},
		{"/static/units/other.service", 404, "no such file"},
	}
	for _, c := range cases {
		code, body := get(c.path)
		if code != c.status || (code == 200 && body != c.want) || (code != 200 && !strings.Contains(body, c.want)) {
			t.Errorf("GET %s: %d %.200q, want %d with %.100q", c.path, code, body, c.status, c.want)
		}
	}
}
