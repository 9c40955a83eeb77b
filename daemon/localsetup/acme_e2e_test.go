package localsetup_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/logstream"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

// machineWebApp registers a machine and gives it an HTTP tunnel named sub,
// also served at its own domains, to a web app on its loopback, through
// real frps and frpc. It returns when the tunnel's port on the VPS side
// answers.
func machineWebApp(t *testing.T, ctx context.Context, st *store.Store, dir, sub, answer string, domains ...string) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s, path %s", answer, r.URL.Path)
	}))
	t.Cleanup(web.Close)
	webPort := web.Listener.Addr().(*net.TCPAddr).Port

	ts := startTunnelServer(t, ctx, st, dir, log)
	kind, name := "http", sub
	in := machines.TunnelInput{MachineID: &ts.machineID, Name: &name, Kind: &kind, LocalPort: &webPort, Subdomain: &sub}
	if len(domains) > 0 {
		in.Domains = &domains
	}
	tun, err := ts.svc.CreateTunnel(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	ts.runClient(t, ctx, tun.RemotePort)
}

// TestHTTPSFromACMEServer: a machine's web app is served at
// https://files.example.test, and at the tunnel's own domain
// https://files.example.org, through Caddy → frps → frpc with certificates
// Caddy obtained from a real ACME server (Pebble), set through the ACME CA
// setting, and curl verifies them against Pebble's root. Pebble validates
// the challenge for real: it resolves the name with a DNS server on
// loopback and fetches the answer from Caddy's loopback ports.
func TestHTTPSFromACMEServer(t *testing.T) {
	for _, tool := range []string{"caddy", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (scripts/install-deps.sh installs it)", tool)
		}
	}
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	machineWebApp(t, ctx, st, dir, "files", "machine web app", "files.example.org")

	httpPort, httpsPort := testutil.QuietPort(t), testutil.QuietPort(t)
	dns := testutil.DNSServer(t, map[string]string{"files.example.test.": "127.0.0.1", "router.example.test.": "127.0.0.1", "files.example.org.": "127.0.0.1"})
	pebble := testutil.StartPebble(t, pebbleBin, testutil.PebbleOptions{HTTPPort: httpPort, TLSPort: httpsPort, DNSServer: dns})

	setup := &localsetup.Service{
		Settings:  localsetup.Settings{Store: st},
		Proxy:     &webproxy.Deployer{Path: filepath.Join(dir, "root/etc/tunnelsvc/Caddyfile"), Run: cmdrun.Exec{}, Units: activeUnits{}},
		Units:     activeUnits{},
		Tunnels:   localsetup.StoreTunnels{Store: st},
		Hub:       logstream.NewHub(nil),
		Dashboard: func() string { return "127.0.0.1:1" },
		Run:       cmdrun.Exec{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now,
	}
	if err := setup.Skip(ctx, "example.test"); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.SetACME(ctx, localsetup.ACME{CA: pebble.Directory, CARoot: pebble.DirRootFile}); err != nil {
		t.Fatalf("the ACME CA setting refused Pebble: %v", err)
	}
	in, ok, err := setup.ProxyInput(ctx)
	if err != nil || !ok {
		t.Fatalf("proxy input: %v %v", ok, err)
	}
	// Loopback high ports instead of 80 and 443, on loopback only.
	in.HTTPPort, in.HTTPSPort, in.BindIP, in.Admin = httpPort, httpsPort, "127.0.0.1", "off"
	file, err := webproxy.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(file), "\tacme_ca "+pebble.Directory+"\n") || !strings.Contains(string(file), "\tacme_ca_root "+pebble.DirRootFile+"\n") {
		t.Fatalf("the Caddyfile does not name the ACME CA:\n%s", file)
	}
	if err := setup.Proxy.Validate(ctx, file); err != nil {
		t.Fatalf("caddy refused the rendered file: %v", err)
	}
	caddyfile := filepath.Join(dir, "Caddyfile")
	os.WriteFile(caddyfile, file, 0o644)
	t.Setenv("XDG_DATA_HOME", dir) // caddy's certificates stay in the test's directory
	t.Setenv("XDG_CONFIG_HOME", dir)
	caddy := testutil.Start(t, "caddy", "caddy", "run", "--config", caddyfile, "--adapter", "caddyfile")

	rootFile := filepath.Join(dir, "pebble-root.pem")
	root := pebble.IssuingRoot(t)
	os.WriteFile(rootFile, root, 0o644)
	url := fmt.Sprintf("https://files.example.test:%d/docs/", httpsPort)
	var body string
	took := testutil.Eventually(t, 90*time.Second, "https://files.example.test through caddy with a certificate from pebble", func() error {
		if !caddy.Running() {
			t.Fatalf("caddy exited:\n%s", caddy.Out.String())
		}
		out, err := exec.Command("curl", "-sS", "--max-time", "5", "--cacert", rootFile,
			"--resolve", fmt.Sprintf("files.example.test:%d:127.0.0.1", httpsPort), url).CombinedOutput()
		body = string(out)
		if err != nil {
			return fmt.Errorf("curl: %v: %s", err, out)
		}
		return nil
	})
	if body != "machine web app, path /docs/" {
		t.Fatalf("through caddy, frps and frpc over HTTPS: %q", body)
	}
	t.Logf("served over HTTPS %v after caddy started", took)

	// The certificate is Pebble's, for the name, and verifies only against
	// the root Pebble issued it under.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(root)
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", httpsPort), &tls.Config{ServerName: "files.example.test", RootCAs: pool})
	if err != nil {
		t.Fatalf("the certificate does not verify against pebble's root: %v", err)
	}
	leaf := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if !strings.Contains(leaf.Issuer.CommonName, "Pebble") || leaf.VerifyHostname("files.example.test") != nil {
		t.Fatalf("certificate for %v issued by %q", leaf.DNSNames, leaf.Issuer.CommonName)
	}
	if out, err := exec.Command("curl", "-sS", "--max-time", "5", "--cacert", pebble.DirRootFile,
		"--resolve", fmt.Sprintf("files.example.test:%d:127.0.0.1", httpsPort), url).CombinedOutput(); err == nil {
		t.Fatalf("curl trusted the certificate under an unrelated root: %s", out)
	}

	// The tunnel's own domain: its own certificate, from the same CA.
	orgURL := fmt.Sprintf("https://files.example.org:%d/own/", httpsPort)
	testutil.Eventually(t, 90*time.Second, "https://files.example.org (the tunnel's own domain) through caddy", func() error {
		out, err := exec.Command("curl", "-sS", "--max-time", "5", "--cacert", rootFile,
			"--resolve", fmt.Sprintf("files.example.org:%d:127.0.0.1", httpsPort), orgURL).CombinedOutput()
		body = string(out)
		if err != nil {
			return fmt.Errorf("curl: %v: %s", err, out)
		}
		return nil
	})
	if body != "machine web app, path /own/" {
		t.Fatalf("at the tunnel's own domain: %q", body)
	}
	conn, err = tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", httpsPort), &tls.Config{ServerName: "files.example.org", RootCAs: pool})
	if err != nil {
		t.Fatalf("the own domain's certificate does not verify against pebble's root: %v", err)
	}
	leaf = conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if leaf.VerifyHostname("files.example.org") != nil || !strings.Contains(leaf.Issuer.CommonName, "Pebble") {
		t.Fatalf("own domain's certificate for %v issued by %q", leaf.DNSNames, leaf.Issuer.CommonName)
	}
}
