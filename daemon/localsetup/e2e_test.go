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
	sealer, _ := seal.LoadOrCreate(filepath.Join(dir, "data"))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "machine web app, path %s", r.URL.Path)
	}))
	defer web.Close()
	webPort := web.Listener.Addr().(*net.TCPAddr).Port

	frpsPort := testutil.FreePort(t)
	lo := testutil.TunnelPortBase()
	ports := store.PortRange{Lo: lo, Hi: lo + 99}
	plugin := httptest.NewServer(&revtunnel.Plugin{Store: st, Log: log})
	defer plugin.Close()
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sp, _ := ssh.NewPublicKey(pub)
	svc := &machines.Service{
		Store: st, Sealer: sealer, Keys: keys{string(ssh.MarshalAuthorizedKey(sp))}, Log: log,
		Limiter: auth.NewLimiter(nil), Ports: ports, ServerHost: "127.0.0.1", FRPSPort: frpsPort,
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
	kind, sub, name := "http", "files", "files"
	tun, err := svc.CreateTunnel(ctx, machines.TunnelInput{MachineID: &reg.MachineID, Name: &name, Kind: &kind, LocalPort: &webPort, Subdomain: &sub})
	if err != nil {
		t.Fatal(err)
	}
	conf, err := svc.ClientConfig(ctx, reg.MachineID, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(dir, "client.toml")
	os.WriteFile(confPath, []byte(conf), 0o600)
	testutil.Start(t, "frpc", frpc, "-c", confPath)
	testutil.WaitListening(t, tun.RemotePort, 10*time.Second)

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
	// the Caddyfile within a second, through the change hook.
	if err := setup.Settings.SaveVPS(ctx, localsetup.VPS{Domain: "example.test", ServerHost: "127.0.0.1", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	svc.OnChange = setup.FollowTunnels(fctx)
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
