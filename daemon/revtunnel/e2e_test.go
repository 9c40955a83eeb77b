package revtunnel_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/reach"

	"golang.org/x/crypto/ssh"

	"github.com/tunnelsvc/tunnelsvc/daemon/api"
	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/delivery"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
)

type keys struct{ key string }

func (k keys) DefaultPublicKey(context.Context) (string, error) { return k.key, nil }

// The shared end-to-end helpers, under their local names.
var (
	freePort   = func(t *testing.T) int { return testutil.FreePort(t) }
	echoServer = func(t *testing.T) int { return testutil.EchoServer(t) }
	echo       = testutil.Echo
	eventually = func(t *testing.T, d time.Duration, what string, cond func() error) time.Duration {
		t.Helper()
		return testutil.Eventually(t, d, what, cond)
	}
	start = func(t *testing.T, name, bin string, args ...string) *testutil.Proc {
		t.Helper()
		return testutil.Start(t, name, bin, args...)
	}
)

// installedAt writes a rendered client config to path, as bootstrap.sh and
// the agent install it at /etc/revtunnel/client.toml: the file is its own
// trustedCaFile, so the pin follows it to path.
func installedAt(t *testing.T, conf, path string) string {
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

// client is a logged-in dashboard client.
type client struct {
	t    *testing.T
	base string
	http *http.Client
}

func (c *client) call(method, path string, body any, out any) int {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.base+path, rd)
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		if s, ok := out.(*string); ok {
			*s = string(raw)
		} else {
			var env struct {
				Data  json.RawMessage `json:"data"`
				Error string          `json:"error"`
			}
			json.Unmarshal(raw, &env)
			if resp.StatusCode < 300 {
				json.Unmarshal(env.Data, out)
			}
		}
	}
	return resp.StatusCode
}

type registration struct {
	TunnelPort   int    `json:"tunnel_port"`
	ClientConfig string `json:"revtunnel_client_config"`
	AgentToken   string `json:"agent_token"`
}

type event struct {
	Source, Kind, Message string
	MachineID             int64 `json:"machine_id"`
}

// engine is the daemon's API and frps plugin with a real frps, on
// 127.0.0.1, ready for machines to register and run real frpc.
type engine struct {
	ctx           context.Context
	st            *store.Store
	c, anon       *client
	ports         store.PortRange
	server        *testutil.Proc
	echoPort      int
	svc           *machines.Service
	register      func(name string) registration
	runClient     func(name, conf string) *testutil.Proc
	machineByName func(name string) map[string]any
	hasEvent      func(kind, contains string) error
	// bridge is the plugin's wss bridge (to frps on frpsPort); dir is the
	// test's directory and deployer writes frps's files.
	bridge   *revtunnel.Bridge
	frpsPort int
	dir      string
	deployer *revtunnel.Deployer
}

func startEngine(t *testing.T) *engine {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sealer, err := seal.LoadOrCreate(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	echoPort := echoServer(t)
	frpsPort := freePort(t)
	lo := testutil.TunnelPorts(t)
	ports := store.PortRange{Lo: lo, Hi: lo + 199}

	bridge := &revtunnel.Bridge{Log: log}
	plugin := httptest.NewServer(&revtunnel.Plugin{Store: st, Log: log, Bridge: bridge})
	t.Cleanup(plugin.Close)
	pluginAddr := strings.TrimPrefix(plugin.URL, "http://")

	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sp, _ := ssh.NewPublicKey(pub)
	svc := &machines.Service{
		Store: st, Sealer: sealer, Keys: keys{string(ssh.MarshalAuthorizedKey(sp))}, Log: log,
		Limiter: auth.NewLimiter(nil), Ports: ports, Reach: &reach.Resolver{ServerHost: "127.0.0.1"}, FRPSPort: frpsPort,
		SSHLocalPort: echoPort, // the machine's "sshd" is the echo server
	}
	svc.Desire = delivery.New(delivery.Options{Store: st, Configs: svc, Log: log}).Desire
	deployer := &revtunnel.Deployer{
		Path: filepath.Join(dir, "root", revtunnel.ServerConfigPath), FRPS: frps,
		CA:       &tunnelca.Authority{Store: st, Sealer: sealer},
		CertPath: filepath.Join(dir, "root", revtunnel.ServerCertPath), KeyPath: filepath.Join(dir, "root", revtunnel.ServerKeyPath),
	}
	bridge.Dial = revtunnel.TLSDialer(func(context.Context) (string, error) { return fmt.Sprintf("127.0.0.1:%d", frpsPort), nil },
		func(ctx context.Context) ([]byte, error) {
			ca, err := deployer.CA.Load(ctx)
			if err != nil {
				return nil, err
			}
			return ca.CertPEM, nil
		})
	deployer.Params = func(context.Context) (frpconf.ServerParams, error) {
		return frpconf.ServerParams{BindPort: frpsPort, PluginAddr: pluginAddr, Ports: ports,
			CertFile: deployer.CertPath, KeyFile: deployer.KeyPath}, nil
	}
	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	rec := &audit.Recorder{Store: st, Log: log, Now: time.Now}
	authSvc := &auth.Service{Store: st, Log: log, Audit: rec, DataDir: cfg.DataDir, Now: time.Now,
		Sessions: &auth.Sessions{Store: st, Now: time.Now}, Limiter: auth.NewLimiter(nil)}
	srv := httptest.NewServer(api.New(api.Options{Config: &cfg, Auth: authSvc, Audit: rec, Log: log, Machines: svc, Reach: svc.Reach, Revtunnel: deployer}))
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	c := &client{t: t, base: srv.URL, http: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
	if code := c.call("POST", "/api/auth/setup", map[string]string{"password": "correct horse battery staple"}, nil); code != 200 {
		t.Fatalf("setup: %d", code)
	}
	anon := &client{t: t, base: srv.URL, http: &http.Client{Timeout: 30 * time.Second}}

	// The daemon writes server.toml; frps runs from it.
	var rmsg struct{ Message string }
	if code := c.call("POST", "/api/local/reconcile", nil, &rmsg); code != 200 {
		t.Fatalf("reconcile: %d", code)
	}
	server := start(t, "frps", frps, "-c", deployer.Path)
	eventually(t, 10*time.Second, "frps listening", func() error {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", frpsPort))
		if err == nil {
			conn.Close()
		}
		return err
	})

	register := func(name string) registration {
		var tok struct{ Token string }
		if code := c.call("POST", "/api/bootstrap/tokens", map[string]any{}, &tok); code != 200 {
			t.Fatalf("token: %d", code)
		}
		var reg registration
		if code := anon.call("POST", "/api/bootstrap", map[string]string{"token": tok.Token, "name": name, "username": "pi"}, &reg); code != 200 {
			t.Fatalf("bootstrap %s: %d", name, code)
		}
		return reg
	}
	runClient := func(name, conf string) *testutil.Proc {
		path := filepath.Join(dir, name+".toml")
		// Each frpc gets its own admin port: several run on this loopback.
		conf = regexp.MustCompile(`(?m)^port = \d+$`).ReplaceAllString(conf, fmt.Sprintf("port = %d", testutil.FreePort(t)))
		conf = installedAt(t, conf, path)
		return start(t, "frpc "+name, frpc, "-c", path)
	}
	machineByName := func(name string) map[string]any {
		var ms []map[string]any
		c.call("GET", "/api/machines", nil, &ms)
		for _, m := range ms {
			if m["name"] == name {
				return m
			}
		}
		return nil
	}
	activity := func() []event {
		var es []event
		c.call("GET", "/api/local/activity", nil, &es)
		return es
	}
	hasEvent := func(kind, contains string) error {
		for _, e := range activity() {
			if e.Kind == kind && strings.Contains(e.Message, contains) {
				return nil
			}
		}
		return fmt.Errorf("no %s event mentioning %q", kind, contains)
	}

	return &engine{ctx: ctx, st: st, c: c, anon: anon, ports: ports, server: server, echoPort: echoPort, svc: svc,
		register: register, runClient: runClient, machineByName: machineByName, hasEvent: hasEvent,
		bridge: bridge, frpsPort: frpsPort, dir: dir, deployer: deployer}
}

// TestRealEngine runs the daemon's API, its frps plugin, a real frps and
// real frpc processes on 127.0.0.1, with configs the daemon rendered.
func TestRealEngine(t *testing.T) {
	e := startEngine(t)
	ctx, st, c, ports, server, echoPort := e.ctx, e.st, e.c, e.ports, e.server, e.echoPort
	register, runClient, machineByName, hasEvent := e.register, e.runClient, e.machineByName, e.hasEvent
	frpsPID := server.Cmd.Process.Pid
	var rmsg struct{ Message string }

	// 1. A machine registered through POST /api/bootstrap carries bytes
	// through its SSH tunnel port.
	a := register("alpha")
	if m := machineByName("alpha"); m["status"] != "pending" {
		t.Fatalf("new machine status %v, want pending", m["status"])
	}
	clientA := runClient("alpha", a.ClientConfig)
	took := eventually(t, 15*time.Second, "bytes through alpha's ssh tunnel port", func() error { return echo(a.TunnelPort) })
	t.Logf("alpha's ssh tunnel carried bytes %v after frpc started", took.Round(time.Millisecond))
	if m := machineByName("alpha"); m["status"] != "online" || m["last_seen"] == nil {
		t.Fatalf("alpha after connecting: %v", m)
	}
	if err := hasEvent(revtunnel.EventConnected, `"alpha"`); err != nil {
		t.Fatal(err)
	}
	alphaID := int64(machineByName("alpha")["id"].(float64))

	// 2. A tcp tunnel added afterwards carries traffic; frps keeps its PID.
	var tun struct {
		ID         int64 `json:"id"`
		RemotePort int   `json:"remote_port"`
	}
	if code := c.call("POST", "/api/tunnels", map[string]any{"machine_id": alphaID, "name": "db", "kind": "tcp", "local_port": echoPort}, &tun); code != 201 {
		t.Fatalf("create tunnel: %d", code)
	}
	if echo(tun.RemotePort) == nil {
		t.Fatal("the tunnel carried traffic before its machine asked for it")
	}
	var newConf string
	if code := c.call("GET", fmt.Sprintf("/api/machines/%d/revtunnel-client", alphaID), nil, &newConf); code != 200 {
		t.Fatalf("client config: %d %s", code, newConf)
	}
	clientA.Stop() // what the agent does: new client.toml, restart revtunnel-client
	clientA = runClient("alpha", newConf)
	eventually(t, 15*time.Second, "bytes through the new tcp tunnel", func() error { return echo(tun.RemotePort) })
	if !server.Running() || server.Cmd.Process.Pid != frpsPID {
		t.Fatal("frps was restarted to add a tunnel")
	}
	if code := c.call("POST", "/api/local/reconcile", nil, &rmsg); code != 200 || rmsg.Message != "revtunnel-server configuration unchanged" {
		t.Fatalf("reconcile after adding a tunnel: %d %q", code, rmsg.Message)
	}
	if err := hasEvent(revtunnel.EventTunnelUp, fmt.Sprintf("port %d", tun.RemotePort)); err != nil {
		t.Fatal(err)
	}

	// 3. A client presenting another machine's secret is refused and recorded.
	b := register("beta")
	secretA := regexp.MustCompile(`(?m)^token = '([^']+)'`).FindStringSubmatch(a.ClientConfig)[1]
	secretB := regexp.MustCompile(`(?m)^token = '([^']+)'`).FindStringSubmatch(b.ClientConfig)[1]
	impostor := runClient("beta-impostor", strings.Replace(b.ClientConfig, secretB, secretA, 1))
	select {
	case <-impostor.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("frpc with another machine's secret was not refused")
	}
	if !strings.Contains(impostor.Out.String(), "credential of machine") {
		t.Fatalf("frpc did not report the refusal:\n%s", impostor.Out.String())
	}
	eventually(t, 2*time.Second, "login refusal recorded", func() error { return hasEvent(revtunnel.EventLoginRefused, "credential of machine") })
	// ...and listed as a stale tunnel credential, grouped with a count.
	eventually(t, 2*time.Second, "stale tunnel credential listed", func() error {
		var stale []struct {
			Kind, ClientAddr, Reason string
			Count                    int
		}
		c.call("GET", "/api/security/stale-tokens", nil, &stale)
		for _, a := range stale {
			if a.Kind == "tunnel_credential" && a.Count >= 1 && strings.Contains(a.Reason, "credential of machine") {
				return nil
			}
		}
		return fmt.Errorf("no tunnel_credential entry in %+v", stale)
	})
	if echo(b.TunnelPort) == nil {
		t.Fatal("beta's port works for an impostor")
	}

	// 4. A client claiming a port it does not own is refused and recorded.
	// A port of the range that nobody holds: frps itself would allow it.
	stolen := 0
	for p := ports.Lo; p <= ports.Hi && stolen == 0; p++ {
		var n int
		if err := st.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM ports WHERE port = ?", p).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			stolen = p
		}
	}
	greedy := strings.Replace(b.ClientConfig, fmt.Sprintf("remotePort = %d", b.TunnelPort), fmt.Sprintf("remotePort = %d", stolen), 1)
	runClient("beta-greedy", greedy)
	eventually(t, 15*time.Second, "port claim refusal recorded", func() error {
		return hasEvent(revtunnel.EventProxyRefused, fmt.Sprintf("may not bind port %d", stolen))
	})
	if echo(stolen) == nil {
		t.Fatalf("port %d, which beta does not own, carries traffic", stolen)
	}

	// 5. Deleting the machine stops its tunnels within 2 s.
	if code := c.call("DELETE", fmt.Sprintf("/api/machines/%d", alphaID), nil, nil); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	took = eventually(t, 2*time.Second, "alpha's tunnels stop after delete", func() error {
		if echo(a.TunnelPort) == nil || echo(tun.RemotePort) == nil {
			return fmt.Errorf("still carrying traffic")
		}
		return nil
	})
	t.Logf("alpha's tunnels stopped %v after the delete answered", took.Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	if echo(a.TunnelPort) == nil || echo(tun.RemotePort) == nil {
		t.Fatal("a deleted machine's tunnel carried traffic again")
	}
	if !server.Running() || server.Cmd.Process.Pid != frpsPID {
		t.Fatal("frps restarted during the test")
	}
}
