// Package daemontest runs the whole daemon for the end-to-end tests of
// other packages, the way `tunnelsvc serve` runs it (app.Serve with
// api.ForDaemon), with stand-ins only at the edges of the process:
// systemd (testutil.MemoryUnits) and the host's tools (nft, sysctl and
// fail2ban-client succeed and change nothing). Its listeners are on
// loopback ports of their own, and RunFRPS starts a real frps from the
// config the daemon wrote, as the revtunnel-server unit would.
package daemontest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/api"
	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
)

// Password is the operator's password Setup sets.
const Password = "correct horse battery staple"

// Options shape the daemon.
type Options struct {
	// Database is a PostgreSQL URL; empty: SQLite in the data directory.
	Database string
	// Edit changes the configuration before the daemon starts.
	Edit func(*config.Config)
	// Minute is how long a minute of the notification watcher's delays
	// lasts (app.Deps.Minute; 0: a minute).
	Minute time.Duration
}

// Daemon is a running daemon.
type Daemon struct {
	App    *app.App
	Config *config.Config
	// URL is the dashboard's (http://127.0.0.1:port).
	URL string
	// Dir holds its files: data/, root/ (its system root) and frps's.
	Dir   string
	Units *testutil.MemoryUnits
	// Log is what the daemon logged (its warnings and errors: the ban
	// tool's "auth failure from" lines among them).
	Log *testutil.SyncBuffer
}

// Start runs a daemon until the test ends.
func Start(t testing.TB, o Options) *Daemon {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.DataDir, cfg.SystemRoot, cfg.Database = filepath.Join(dir, "data"), filepath.Join(dir, "root"), o.Database
	frps, _ := testutil.FRP()
	cfg.BinDir = filepath.Dir(frps)
	loop := func() string { return fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)) }
	cfg.Listen, cfg.PluginListen, cfg.FRPSDashboardListen, cfg.GateListen = loop(), loop(), loop(), "127.0.0.1:0"
	cfg.FRPSPort = testutil.FreePort(t)
	cfg.TunnelPortLo = testutil.TunnelPorts(t)
	cfg.TunnelPortHi = cfg.TunnelPortLo + 199
	cfg.LogLevel = "warn"
	if o.Edit != nil {
		o.Edit(&cfg)
	}
	d := &Daemon{Config: &cfg, URL: "http://" + cfg.Listen, Dir: dir, Units: &testutil.MemoryUnits{}, Log: &testutil.SyncBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	serving, done := make(chan *app.App, 1), make(chan error, 1)
	deps := app.Deps{Units: d.Units, HostTools: testutil.NoHostTools{}, Minute: o.Minute, Serving: func(a *app.App) { serving <- a }}
	log := slog.New(slog.NewTextHandler(testWriter{t, d.Log}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	go func() { done <- app.Serve(ctx, &cfg, log, deps, api.ForDaemon) }()
	select {
	case d.App = <-serving:
	case err := <-done:
		cancel()
		t.Fatalf("the daemon did not start: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("the daemon did not start within 60 s")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the daemon stopped with: %v", err)
		}
	})
	return d
}

// testWriter sends the daemon's warnings and errors to the test's log,
// and keeps them in keep.
type testWriter struct {
	t    testing.TB
	keep *testutil.SyncBuffer
}

func (w testWriter) Write(p []byte) (int, error) {
	w.keep.Write(p)
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// RunFRPS starts a real frps from the configuration the daemon wrote, with
// its certificate where the revtunnel-server unit's LoadCredential puts it,
// and waits until it listens.
func (d *Daemon) RunFRPS(t testing.TB) *testutil.Proc {
	t.Helper()
	dep := d.App.Revtunnel
	var conf []byte
	testutil.Eventually(t, 15*time.Second, "the daemon writes frps's config", func() error {
		if _, err := dep.Reconcile(context.Background()); err != nil {
			return err
		}
		var err error
		conf, err = os.ReadFile(dep.Path)
		return err
	})
	conf = bytes.ReplaceAll(conf, []byte(revtunnel.RuntimeCertPath), []byte(dep.CertPath))
	conf = bytes.ReplaceAll(conf, []byte(revtunnel.RuntimeKeyPath), []byte(dep.KeyPath))
	path := filepath.Join(d.Dir, "frps.toml")
	if err := os.WriteFile(path, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	p := testutil.Start(t, "frps", dep.FRPS, "-c", path)
	testutil.WaitListening(t, d.Config.FRPSPort, 15*time.Second)
	return p
}

// Client calls the dashboard's API.
type Client struct {
	t    testing.TB
	Base string
	HTTP *http.Client
}

// Anon is a client without a session.
func (d *Daemon) Anon(t testing.TB) *Client {
	return &Client{t: t, Base: d.URL, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// Setup sets the operator's password (from loopback, as on the box) and
// returns the signed-in client.
func (d *Daemon) Setup(t testing.TB) *Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &Client{t: t, Base: d.URL, HTTP: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
	if code, body := c.Call("POST", "/api/auth/setup", map[string]string{"password": Password}, nil); code != 200 {
		t.Fatalf("setup: %d %s", code, body)
	}
	return c
}

// Call sends body as JSON and decodes the answer's data into out (a
// *string gets the raw body); it returns the status and the raw body.
func (c *Client) Call(method, path string, body, out any) (int, string) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.Base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if s, ok := out.(*string); ok {
		*s = string(raw)
	} else if out != nil && resp.StatusCode < 300 {
		var env struct {
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(raw, &env); err != nil {
			c.t.Fatalf("%s %s: %v in %q", method, path, err, raw)
		}
		if err := json.Unmarshal(env.Data, out); err != nil {
			c.t.Fatalf("%s %s: %v in %q", method, path, err, raw)
		}
	}
	return resp.StatusCode, string(raw)
}

// ErrorOf is the error message of an API answer's raw body ("" when it
// has none).
func ErrorOf(body string) string {
	var env struct {
		Error string `json:"error"`
	}
	json.Unmarshal([]byte(body), &env)
	return env.Error
}

// Machine is a machine registered through the API.
type Machine struct {
	ID   int64  `json:"-"`
	Name string `json:"-"`
	// TunnelPort is its ssh tunnel's port on this server; ClientConfig
	// the frpc config it was given at registration (its tunnels' come
	// from GET /api/machines/{id}/revtunnel-client).
	TunnelPort   int    `json:"tunnel_port"`
	ClientConfig string `json:"revtunnel_client_config"`
	AgentToken   string `json:"agent_token"`
}

// Join registers a machine called name as bootstrap.sh does: op (signed
// in) creates a one-time token, and the machine posts it to
// /api/bootstrap without a session.
func (d *Daemon) Join(t testing.TB, op *Client, name string) Machine {
	t.Helper()
	var tok struct{ Token string }
	if code, body := op.Call("POST", "/api/bootstrap/tokens", map[string]any{}, &tok); code != 200 {
		t.Fatalf("bootstrap token: %d %s", code, body)
	}
	m := Machine{Name: name}
	if code, body := d.Anon(t).Call("POST", "/api/bootstrap", map[string]string{"token": tok.Token, "name": name, "username": "pi"}, &m); code != 200 {
		t.Fatalf("bootstrap %s: %d %s", name, code, body)
	}
	var ms []struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	}
	if code, body := op.Call("GET", "/api/machines", nil, &ms); code != 200 {
		t.Fatalf("machines: %d %s", code, body)
	}
	for _, x := range ms {
		if x.Name == name {
			m.ID = x.ID
			return m
		}
	}
	t.Fatalf("machine %s is not in the list after joining: %+v", name, ms)
	return m
}

var (
	frpcAdminPort = regexp.MustCompile(`(?m)^port = \d+$`)
	frpcSSHPort   = regexp.MustCompile(`(?m)^localPort = 22$`)
)

// InstallClientConfig writes conf, a client config the daemon rendered,
// to path as bootstrap.sh and the agent install it at
// frpconf.DefaultClientConfigPath: the file is its own trustedCaFile, so
// the pin follows it to path. It returns the config as written.
func InstallClientConfig(t testing.TB, conf, path string) string {
	t.Helper()
	want := "trustedCaFile = '" + frpconf.DefaultClientConfigPath + "'"
	if !strings.Contains(conf, want) {
		t.Fatalf("client config does not pin its CA:\n%s", conf)
	}
	conf = strings.Replace(conf, want, "trustedCaFile = '"+path+"'", 1)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return conf
}

// RunFRPC runs a machine's frpc on conf, a client config the daemon
// rendered, installed as bootstrap.sh installs it (the file is its own
// trustedCaFile), with an admin port of its own (several frpc share this
// loopback) and, when sshd is not 0, the machine's sshd on port sshd
// instead of 22.
func (d *Daemon) RunFRPC(t testing.TB, name, conf string, sshd int) *testutil.Proc {
	t.Helper()
	_, frpc := testutil.FRP()
	return d.RunFRPCBinary(t, frpc, name, conf, sshd)
}

// RunFRPCBinary is RunFRPC with the frpc at bin (the previous one, say).
func (d *Daemon) RunFRPCBinary(t testing.TB, bin, name, conf string, sshd int) *testutil.Proc {
	t.Helper()
	path := filepath.Join(d.Dir, "frpc-"+name+".toml")
	conf = frpcAdminPort.ReplaceAllString(conf, fmt.Sprintf("port = %d", testutil.FreePort(t)))
	if sshd != 0 {
		conf = frpcSSHPort.ReplaceAllString(conf, fmt.Sprintf("localPort = %d", sshd))
	}
	InstallClientConfig(t, conf, path)
	return testutil.Start(t, "frpc "+name, bin, "-c", path)
}
