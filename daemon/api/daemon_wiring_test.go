package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/api"
	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/apicheck"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
)

// fakeMachine is a machine's side of the agent: it records the configs it
// applies and the restarts of its tunnel client.
type fakeMachine struct {
	// agentToken is what the machine's join handed it.
	agentToken string

	mu       sync.Mutex
	configs  []string
	restarts int
	// sets are the client sets it took (PUT /clients); each one's main
	// config is in configs too.
	sets []agent.ClientSet
}

// ApplyClients takes a set of clients, one per edge, as an agent that
// reports the "edges" capability does.
func (f *fakeMachine) ApplyClients(_ context.Context, body []byte) error {
	set, err := agent.ParseClientSet(body)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.sets = append(f.sets, set)
	f.configs = append(f.configs, set.Primary)
	f.mu.Unlock()
	return nil
}

// lastSet returns the last client set it took and how many it took.
func (f *fakeMachine) lastSet() (agent.ClientSet, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sets) == 0 {
		return agent.ClientSet{}, 0
	}
	return f.sets[len(f.sets)-1], len(f.sets)
}

func (f *fakeMachine) UnitState(context.Context) (map[string]string, error) {
	return map[string]string{"ActiveState": "active", "SubState": "running"}, nil
}
func (f *fakeMachine) Restart(context.Context) error {
	f.mu.Lock()
	f.restarts++
	f.mu.Unlock()
	return nil
}
func (f *fakeMachine) ApplyConfig(_ context.Context, cfg []byte) error {
	f.mu.Lock()
	f.configs = append(f.configs, string(cfg))
	f.mu.Unlock()
	return nil
}
func (f *fakeMachine) ClientVersion(context.Context) (string, error) { return "0.65.0", nil }
func (f *fakeMachine) Monotonic() (time.Duration, error)             { return time.Hour, nil }
func (f *fakeMachine) Uninstall(context.Context) error               { return nil }

func (f *fakeMachine) last() (string, int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.configs) == 0 {
		return "", 0, f.restarts
	}
	return f.configs[len(f.configs)-1], len(f.configs), f.restarts
}

// wiredDaemon is the daemon as Serve builds it (New), its background loops
// running, its API served over loopback, with no flag naming an address.
type wiredDaemon struct {
	t      *testing.T
	a      *app.App
	srv    *httptest.Server
	cookie string
}

func newWiredDaemon(t *testing.T) *wiredDaemon {
	t.Helper()
	d := newWiredDaemonWith(t, nil)
	d.call("POST", "/api/auth/setup", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	return d
}

// newWiredDaemonWith is newWiredDaemon before the setup, its configuration
// changed by edit first (when not nil), built with deps.
func newWiredDaemonWith(t *testing.T, edit func(*config.Config), deps ...app.Deps) *wiredDaemon {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir, cfg.SystemRoot = t.TempDir(), t.TempDir()
	lo := testutil.TunnelPorts(t)
	cfg.TunnelPortLo, cfg.TunnelPortHi = lo, lo+199
	if edit != nil {
		edit(&cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var dep app.Deps
	if len(deps) > 0 {
		dep = deps[0]
	}
	a, err := app.New(context.Background(), &cfg, log, dep)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.Loops.Start(ctx)
	// Every answer is held against openapi.yaml: the document describes
	// the server as main builds it.
	doc, err := apicheck.New(api.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(doc.Handler(t, api.ForDaemon(a)))
	t.Cleanup(func() { srv.Close(); cancel(); a.Close() })
	return &wiredDaemon{t: t, a: a, srv: srv}
}

// call sends one API request and decodes the answer's data into out.
func (d *wiredDaemon) call(method, path, body string, want int, out any) {
	d.t.Helper()
	raw := d.send(method, path, body, want)
	if out != nil {
		var env struct{ Data json.RawMessage }
		if err := json.Unmarshal(raw, &env); err != nil {
			d.t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
		if err := json.Unmarshal(env.Data, out); err != nil {
			d.t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
}

// send sends one API request that must answer want, keeps the session
// cookie it sets, and returns the answer's body.
func (d *wiredDaemon) send(method, path, body string, want int) []byte {
	d.t.Helper()
	req, _ := http.NewRequest(method, d.srv.URL+path, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	if d.cookie != "" {
		req.Header.Set("Cookie", d.cookie)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		d.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, raw, want)
	}
	for _, c := range resp.Cookies() {
		if c.Name == "tunnel_session" {
			d.cookie = c.Name + "=" + c.Value
		}
	}
	return raw
}

// join registers a machine through the API as bootstrap.sh does and
// starts its agent where frps would forward the machine's agent tunnel.
func (d *wiredDaemon) join(name string) (int64, *fakeMachine) {
	d.t.Helper()
	var tok struct {
		Token   string `json:"token"`
		Command string `json:"command"`
	}
	d.call("POST", "/api/bootstrap/tokens", `{}`, http.StatusOK, &tok)
	var reg struct {
		AgentToken string `json:"agent_token"`
	}
	d.call("POST", "/api/bootstrap", fmt.Sprintf(`{"token":%q,"name":%q,"username":"pi"}`, tok.Token, name), http.StatusOK, &reg)
	var ms []struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	}
	d.call("GET", "/api/machines", "", http.StatusOK, &ms)
	var id int64
	for _, m := range ms {
		if m.Name == name {
			id = m.ID
		}
	}
	m, err := d.a.Store.GetMachine(context.Background(), id)
	if err != nil {
		d.t.Fatal(err)
	}
	sys := &fakeMachine{agentToken: reg.AgentToken}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(m.AgentPort)))
	if err != nil {
		d.t.Fatal(err)
	}
	srv := &http.Server{Handler: &agent.Server{Token: reg.AgentToken, Unit: "revtunnel-client.service", Sys: sys,
		Later: func(f func()) { f() }}}
	go srv.Serve(l)
	d.t.Cleanup(func() { srv.Close() })
	return id, sys
}

type machineView struct {
	StatusReason string `json:"status_reason"`
	Config       struct {
		State   string `json:"state"`
		Applied int64  `json:"applied_generation"`
		Summary string `json:"summary"`
	} `json:"config"`
}

// The daemon built by New, as Serve builds it, delivers every change to the
// machines: a tunnel created right after the join, and a new domain, with
// no address captured at start and no flag naming one.
func TestNewDeliversChangesToMachines(t *testing.T) {
	d := newWiredDaemon(t)
	ctx := context.Background()
	// The operator installs with a domain: machines reach router.<domain>.
	if err := d.a.Setup.Settings.SaveVPS(ctx, localsetup.VPS{Domain: "example.test", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var tok struct {
		Command string `json:"command"`
	}
	d.call("POST", "/api/bootstrap/tokens", `{}`, http.StatusOK, &tok)
	if !strings.Contains(tok.Command, "https://router.example.test/static/bootstrap.sh") {
		t.Fatalf("join command %q does not send machines to router.example.test", tok.Command)
	}
	id, sys := d.join("nas")
	d.call("POST", "/api/tunnels", fmt.Sprintf(`{"machine_id":%d,"name":"web","kind":"http","local_port":8080,"subdomain":"web"}`, id), http.StatusCreated, nil)
	testutil.Eventually(t, 10*time.Second, "the new tunnel reaches the machine", func() error {
		cfg, _, _ := sys.last()
		if !strings.HasPrefix(cfg, "# tunnelsvc config generation: 2\n") || !strings.Contains(cfg, "tunnel-") ||
			!strings.Contains(cfg, "serverAddr = 'router.example.test'") {
			return fmt.Errorf("the machine runs %q", cfg)
		}
		var m machineView
		d.call("GET", fmt.Sprintf("/api/machines/%d", id), "", http.StatusOK, &m)
		if m.Config.State != "applied" || m.Config.Applied != 2 || m.Config.Summary != "config applied (generation 2)" {
			return fmt.Errorf("machine shows %+v", m.Config)
		}
		return nil
	})
	// The domain changes: the machine follows, its client restarts onto
	// the new address.
	if err := d.a.Setup.Settings.SaveVPS(ctx, localsetup.VPS{Domain: "new.test", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the new address reaches the machine", func() error {
		cfg, _, restarts := sys.last()
		if !strings.Contains(cfg, "serverAddr = 'router.new.test'") || restarts != 1 {
			return fmt.Errorf("restarts %d, the machine runs %q", restarts, cfg)
		}
		return nil
	})
}
