package revtunnel_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
	systemd "github.com/tunnelsvc/tunnelsvc/daemon/units"
)

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("%s differs from %s (go test -update rewrites it):\n%s", name, path, got)
	}
}

var serverParams = frpconf.ServerParams{
	BindPort: 7000, PluginAddr: "127.0.0.1:7381",
	Ports:    store.PortRange{Lo: 20000, Hi: 29999},
	CertFile: revtunnel.RuntimeCertPath, KeyFile: revtunnel.RuntimeKeyPath,
}

func TestServerConfigGolden(t *testing.T) {
	for _, c := range []struct {
		name   string
		p      frpconf.ServerParams
		custom string
	}{
		{"server", serverParams, ""},
		{"server-custom", serverParams, "# operator's own settings\nmaxPortsPerClient = 20\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := frpconf.ServerConfig(c.p, c.custom)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(got, frpconf.CustomBegin+"\n"+c.custom+frpconf.CustomEnd+"\n") {
				t.Fatalf("config does not end with the custom block:\n%s", got)
			}
			golden(t, c.name+".toml", got)
			if err := revtunnel.Verify(context.Background(), frps, got); err != nil {
				t.Fatalf("frps refuses the rendered config: %v", err)
			}
		})
	}
}

func TestClientConfigGolden(t *testing.T) {
	caPEM, err := os.ReadFile(filepath.Join("testdata", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	p := frpconf.ClientParams{
		ServerAddr: "vps.example.com", ServerPort: 7000, MachineID: 7, Secret: "s3cr3t-of-machine-7",
		SSHLocalPort: 22, TunnelPort: 20001, AgentLocalPort: 7390, AgentPort: 20002,
		CA: string(caPEM), ServerName: tunnelca.ServerName,
	}
	for _, c := range []struct {
		name      string
		tunnels   []store.Tunnel
		transport string
		wireV2    bool
	}{
		{"client", nil, "", false},
		// Through the web proxy on 443: the same pinning and credential.
		{"client-wss", nil, frpconf.TransportWSS, false},
		// A client that reported frp's wire protocol v2.
		{"client-wire-v2", nil, "", true},
		{"client-tunnels", []store.Tunnel{
			{ID: 3, MachineID: 7, Name: "web", Kind: "http", LocalPort: 8080, Subdomain: "web", RemotePort: 20003},
			{ID: 4, MachineID: 7, Name: "db", Kind: "tcp", LocalPort: 5432, Public: true, RemotePort: 20004},
			// Paused: no proxy, only a comment naming it.
			{ID: 5, MachineID: 7, Name: "old", Kind: "http", LocalPort: 9090, Subdomain: "old", RemotePort: 20005, Paused: true},
			{ID: 6, MachineID: 7, Name: "ftp", Kind: "tcp", LocalPort: 21, RemotePort: 20006, Paused: true},
		}, "", false},
		// PROXY protocol headers: frpc writes a tcp and a udp tunnel's;
		// an http tunnel's proxy has none (the edge writes its header).
		{"client-proxy-protocol", []store.Tunnel{
			{ID: 3, MachineID: 7, Name: "mail", Kind: "tcp", LocalPort: 25, Public: true, RemotePort: 20003, ProxyProtocol: "v1"},
			{ID: 4, MachineID: 7, Name: "game", Kind: "udp", LocalPort: 2456, Public: true, RemotePort: 20004, ProxyProtocol: "v2"},
			{ID: 5, MachineID: 7, Name: "shop", Kind: "http", LocalPort: 8080, Subdomain: "shop", RemotePort: 20005, ProxyProtocol: "v2"},
		}, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p.Tunnels, p.Transport, p.ServerPort, p.WireV2 = c.tunnels, c.transport, 7000, c.wireV2
			if c.transport == frpconf.TransportWSS {
				p.ServerPort = 443
			}
			got, err := frpconf.ClientConfig(p)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, c.name+".toml", got)
			if err := revtunnel.Verify(context.Background(), frpc, got); err != nil {
				t.Fatalf("frpc refuses the rendered config: %v", err)
			}
			// The file is its own trustedCaFile: frpc's loader
			// (x509.CertPool.AppendCertsFromPEM) finds exactly our CA in it.
			if !strings.Contains(got, "trustedCaFile = '"+frpconf.DefaultClientConfigPath+"'") ||
				!strings.Contains(got, "serverName = '"+tunnelca.ServerName+"'") {
				t.Fatalf("config does not pin its own file and the server name:\n%s", got)
			}
			ca, _ := tunnelca.ParseCert(caPEM)
			fromFile, _ := tunnelca.ParseCert([]byte(got))
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM([]byte(got)) || fromFile == nil || !fromFile.Equal(ca) {
				t.Fatal("the CA cannot be read back out of the config file")
			}
		})
	}
	// Without a CA there is no config: an unpinned frpc would hand its
	// secret to any server.
	p.CA = ""
	if _, err := frpconf.ClientConfig(p); err == nil || !strings.Contains(err.Error(), "no tunnel CA") {
		t.Fatalf("rendering without a CA: %v", err)
	}
}

func TestVerifyReportsToolWords(t *testing.T) {
	err := revtunnel.Verify(context.Background(), frps, "bindPort = \"seven\"\n")
	var te *revtunnel.ToolError
	if !errors.As(err, &te) || !strings.Contains(te.Output, "bindPort") {
		t.Fatalf("err = %v, want frps's own words about bindPort", err)
	}
}

type fakeUnits struct {
	restarts []string
	err      error
}

func (f *fakeUnits) Restart(_ context.Context, name string) error {
	f.restarts = append(f.restarts, name)
	return f.err
}

func TestReconcileKeepsCustomBlock(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	params := serverParams
	units := &fakeUnits{}
	d := &revtunnel.Deployer{
		Path: filepath.Join(root, revtunnel.ServerConfigPath), FRPS: frps, Units: units,
		Params:   func(context.Context) (frpconf.ServerParams, error) { return params, nil },
		CA:       testCA(t),
		CertPath: filepath.Join(root, revtunnel.ServerCertPath), KeyPath: filepath.Join(root, revtunnel.ServerKeyPath),
	}
	msg, err := d.Reconcile(ctx)
	if err != nil || !strings.HasPrefix(msg, "revtunnel-server configuration written, certificate renewed (no certificate yet) and revtunnel-server restarted") || len(units.restarts) != 1 || units.restarts[0] != "revtunnel-server.service" {
		t.Fatalf("first reconcile: %q %v %v", msg, err, units.restarts)
	}
	first, _ := os.ReadFile(d.Path)
	if view, _ := d.Render(ctx); view != string(first) {
		t.Fatal("the diagnostic view differs from the deployed file with an empty custom block")
	}
	// Unchanged: no write, no restart.
	if msg, err := d.Reconcile(ctx); err != nil || msg != "revtunnel-server configuration unchanged" || len(units.restarts) != 1 {
		t.Fatalf("second reconcile: %q %v %v", msg, err, units.restarts)
	}
	// The operator writes in the custom block; a settings change keeps it.
	edited := strings.Replace(string(first), frpconf.CustomEnd, "maxPortsPerClient = 20\n"+frpconf.CustomEnd, 1)
	os.WriteFile(d.Path, []byte(edited), 0o640)
	params.BindPort = 7001
	if _, err := d.Reconcile(ctx); err != nil || len(units.restarts) != 2 {
		t.Fatalf("reconcile after bind change: %v %v", err, units.restarts)
	}
	now, _ := os.ReadFile(d.Path)
	if !strings.Contains(string(now), "bindPort = 7001") || !strings.Contains(string(now), "maxPortsPerClient = 20\n"+frpconf.CustomEnd) {
		t.Fatalf("custom block lost or settings not applied:\n%s", now)
	}
	// A custom block frps refuses: the file stays, no restart, frps's words.
	bad := strings.Replace(string(now), "maxPortsPerClient = 20", "maxPortsPerClient = \"many\"", 1)
	os.WriteFile(d.Path, []byte(bad), 0o640)
	params.BindPort = 7000
	_, err = d.Reconcile(ctx)
	if err == nil || !strings.Contains(err.Error(), "frps verify: ") || !strings.Contains(err.Error(), "maxPortsPerClient") {
		t.Fatalf("err = %v, want frps's refusal", err)
	}
	if kept, _ := os.ReadFile(d.Path); string(kept) != bad || len(units.restarts) != 2 {
		t.Fatal("a refused config replaced the file or restarted the unit")
	}
	// Without a unit manager the file is written and the message says so.
	os.WriteFile(d.Path, []byte(now), 0o640)
	d.Units = nil
	if msg, err := d.Reconcile(ctx); err != nil || !strings.Contains(msg, "not restarted") {
		t.Fatalf("%q %v", msg, err)
	}
	// A restart failure is reported after the write, and the next
	// reconcile, nothing changed since, restarts it again rather than
	// taking the file for what frps runs.
	failing := &fakeUnits{err: errors.New("unit revtunnel-server.service not found")}
	d.Units = failing
	params.BindPort = 7002
	if _, err := d.Reconcile(ctx); err == nil || !strings.Contains(err.Error(), "unit revtunnel-server.service not found") {
		t.Fatalf("restart failure: %v", err)
	}
	if _, err := d.Reconcile(ctx); err == nil || len(failing.restarts) != 2 {
		t.Fatalf("the owed restart was not tried again: %v %v", err, failing.restarts)
	}
	failing.err = nil
	if msg, err := d.Reconcile(ctx); err != nil || msg != "revtunnel-server configuration written earlier and revtunnel-server restarted" || len(failing.restarts) != 3 {
		t.Fatalf("the owed restart: %q %v %v", msg, err, failing.restarts)
	}
	if msg, err := d.Reconcile(ctx); err != nil || msg != "revtunnel-server configuration unchanged" || len(failing.restarts) != 3 {
		t.Fatalf("after the owed restart: %q %v %v", msg, err, failing.restarts)
	}
	// Without systemd nothing runs frps as a unit: the file is written and
	// nothing is owed.
	d.Units = &fakeUnits{err: fmt.Errorf("restart: %w", systemd.ErrUnavailable)}
	params.BindPort = 7003
	if msg, err := d.Reconcile(ctx); err != nil || !strings.HasSuffix(msg, "systemd is not available, so revtunnel-server was not restarted") {
		t.Fatalf("without systemd: %q %v", msg, err)
	}
	if msg, err := d.Reconcile(ctx); err != nil || msg != "revtunnel-server configuration unchanged" {
		t.Fatalf("without systemd, again: %q %v", msg, err)
	}
}
