package localsetup_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/logstream"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

var frps, frpc, pebbleBin string

func TestMain(m *testing.M) {
	auth.LowCostForTests()
	frps, frpc = testutil.FRP()
	pebbleBin = testutil.PebbleBin()
	os.Exit(m.Run())
}

type keys struct{ key string }

func (k keys) DefaultPublicKey(context.Context) (string, error) { return k.key, nil }

// activeUnits says every unit runs and records reloads.
type activeUnits struct{ units.Unavailable }

func (activeUnits) State(context.Context, string) (units.State, error) {
	return units.State{ActiveState: "active"}, nil
}
func (activeUnits) Reload(context.Context, string) error { return nil }

// TestCaddyInFrontOfRealTunnel: a machine registers, gets an HTTP tunnel to
// its local web server, and a real caddy running the Caddyfile the daemon
// rendered serves that web server at <sub>.<domain> through real frps and
// frpc. Renaming the tunnel's subdomain moves the site.
func TestCaddyInFrontOfRealTunnel(t *testing.T) {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Skip("caddy is not installed (scripts/install-deps.sh installs it)")
	}
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "machine web app, path %s", r.URL.Path)
	}))
	defer web.Close()
	webPort := web.Listener.Addr().(*net.TCPAddr).Port

	ts := startTunnelServer(t, ctx, st, dir, log)
	svc := ts.svc
	kind, sub, name := "http", "files", "files"
	tun, err := svc.CreateTunnel(ctx, machines.TunnelInput{MachineID: &ts.machineID, Name: &name, Kind: &kind, LocalPort: &webPort, Subdomain: &sub})
	if err != nil {
		t.Fatal(err)
	}
	ts.runClient(t, ctx, tun.RemotePort)

	// The set-up renders the Caddyfile from the stored domain and tunnels.
	setup := &localsetup.Service{
		Settings:  localsetup.Settings{Store: st},
		Proxy:     &webproxy.Deployer{Path: filepath.Join(dir, "root/etc/tunnelsvc/Caddyfile"), Run: cmdrun.Exec{}, Units: activeUnits{}},
		Units:     activeUnits{},
		Tunnels:   localsetup.StoreTunnels{Store: st},
		Hub:       logstream.NewHub(nil),
		Dashboard: func() string { return "127.0.0.1:1" },
		Run:       cmdrun.Exec{}, Log: log, Now: time.Now,
	}
	if err := setup.Skip(ctx, "example.test"); err != nil {
		t.Fatal(err)
	}
	caddyPort := testutil.FreePort(t)
	in, ok, err := setup.ProxyInput(ctx)
	if err != nil || !ok {
		t.Fatalf("proxy input: %v %v", ok, err)
	}
	in.PlainHTTPPort, in.Admin = caddyPort, "off"
	file, err := webproxy.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := setup.Proxy.Validate(ctx, file); err != nil {
		t.Fatalf("caddy refused the rendered file: %v", err)
	}
	caddyfile := filepath.Join(dir, "Caddyfile")
	os.WriteFile(caddyfile, file, 0o644)
	t.Setenv("XDG_DATA_HOME", dir) // caddy's storage stays in the test's directory
	t.Setenv("XDG_CONFIG_HOME", dir)
	testutil.Start(t, "caddy", "caddy", "run", "--config", caddyfile, "--adapter", "caddyfile")
	testutil.WaitListening(t, caddyPort, 10*time.Second)

	get := func(host string) (int, string) {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/docs/", caddyPort), nil)
		req.Host = host
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("files.example.test"); code != 200 || body != "machine web app, path /docs/" {
		t.Fatalf("through caddy, frps and frpc: %d %q", code, body)
	}
	if _, body := get("other.example.test"); strings.Contains(body, "machine web app") {
		t.Fatal("a host without a tunnel reached the machine")
	}

	// Once the proxy is installed, renaming the tunnel's subdomain redeploys
	// the Caddyfile within a second, through the change hook (the daemon
	// runs the same deploy from its follower loop).
	if err := setup.Settings.SaveVPS(ctx, localsetup.VPS{Domain: "example.test", ServerHost: "127.0.0.1", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	svc.OnChange = func(int64) {
		if err := setup.DeployProxy(fctx, false); err != nil {
			t.Errorf("deploy after the change: %v", err)
		}
	}
	newSub := "docs"
	if _, err := svc.UpdateTunnel(ctx, tun.ID, machines.TunnelInput{Subdomain: &newSub}); err != nil {
		t.Fatal(err)
	}
	took := testutil.Eventually(t, time.Second, "Caddyfile follows the rename", func() error {
		b, err := os.ReadFile(setup.Proxy.Path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "docs.example.test {") || strings.Contains(string(b), "files.example.test") {
			return fmt.Errorf("deployed Caddyfile:\n%s", b)
		}
		return nil
	})
	t.Logf("Caddyfile redeployed %v after the rename", took)
}

// tunnelServer is a real frps on loopback, answering to the daemon's plugin
// and serving a certificate of the daemon's tunnel CA, with one machine
// ("nas") registered to it. The real-engine tests below share it.
type tunnelServer struct {
	svc       *machines.Service
	machineID int64
	dir       string
}

// startTunnelServer starts frps from the daemon's own config and registers
// the machine; log receives the daemon side's lines.
func startTunnelServer(t *testing.T, ctx context.Context, st *store.Store, dir string, log *slog.Logger) *tunnelServer {
	t.Helper()
	sealer, err := seal.LoadOrCreate(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	frpsPort := testutil.FreePort(t)
	lo := testutil.TunnelPorts(t)
	ports := store.PortRange{Lo: lo, Hi: lo + 99}
	plugin := httptest.NewServer(&revtunnel.Plugin{Store: st, Log: log})
	t.Cleanup(plugin.Close)
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sp, _ := ssh.NewPublicKey(pub)
	svc := &machines.Service{
		Store: st, Sealer: sealer, Keys: keys{string(ssh.MarshalAuthorizedKey(sp))}, Log: log,
		Limiter: auth.NewLimiter(nil), Ports: ports, Reach: &reach.Resolver{ServerHost: "127.0.0.1"}, FRPSPort: frpsPort,
		SSHLocalPort: testutil.EchoServer(t), ClientAdminPort: testutil.FreePort(t),
		ClientConfigPath: filepath.Join(dir, "client.toml"),
	}
	deployer := &revtunnel.Deployer{
		Path: filepath.Join(dir, "root", revtunnel.ServerConfigPath), FRPS: frps,
		CA:       &tunnelca.Authority{Store: st, Sealer: sealer},
		CertPath: filepath.Join(dir, "root", revtunnel.ServerCertPath), KeyPath: filepath.Join(dir, "root", revtunnel.ServerKeyPath),
	}
	deployer.Params = func(context.Context) (frpconf.ServerParams, error) {
		return frpconf.ServerParams{BindPort: frpsPort, PluginAddr: strings.TrimPrefix(plugin.URL, "http://"), Ports: ports,
			CertFile: deployer.CertPath, KeyFile: deployer.KeyPath}, nil
	}
	if _, err := deployer.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Start(t, "frps", frps, "-c", deployer.Path)
	testutil.WaitListening(t, frpsPort, 10*time.Second)

	tok, err := svc.CreateToken(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := svc.Bootstrap(ctx, machines.BootstrapRequest{Token: tok.Token, Name: "nas", Username: "pi", Client: netip.MustParseAddr("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	return &tunnelServer{svc: svc, machineID: reg.MachineID, dir: dir}
}

// runClient starts the machine's frpc on its current config and waits until
// frps listens on every port given.
func (ts *tunnelServer) runClient(t *testing.T, ctx context.Context, ports ...int) {
	t.Helper()
	conf, err := ts.svc.ClientConfig(ctx, ts.machineID, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(ts.dir, "client.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.Start(t, "frpc", frpc, "-c", confPath)
	for _, p := range ports {
		testutil.WaitListening(t, p, 10*time.Second)
	}
}
