package localsetup_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

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
	w := newWebApp(t, "files", "machine web app", "files.example.org")
	dir := w.d.Dir

	httpPort, httpsPort := testutil.QuietPort(t), testutil.QuietPort(t)
	dns := testutil.DNSServer(t, map[string]string{"files.example.test.": "127.0.0.1", "router.example.test.": "127.0.0.1", "files.example.org.": "127.0.0.1"})
	pebble := testutil.StartPebble(t, pebbleBin, testutil.PebbleOptions{HTTPPort: httpPort, TLSPort: httpsPort, DNSServer: dns})

	if code, body := w.c.Call("PUT", "/api/local/acme", map[string]string{"acme_ca": pebble.Directory, "acme_ca_root": pebble.DirRootFile}, nil); code != 200 {
		t.Fatalf("the ACME CA setting refused Pebble: %d %s", code, body)
	}
	// Loopback high ports instead of 80 and 443, on loopback only.
	file := daemonCaddyfile(t, w.d, func(in *webproxy.Input) { in.HTTPPort, in.HTTPSPort, in.BindIP = httpPort, httpsPort, "127.0.0.1" })
	if !strings.Contains(string(file), "\tacme_ca "+pebble.Directory+"\n") || !strings.Contains(string(file), "\tacme_ca_root "+pebble.DirRootFile+"\n") {
		t.Fatalf("the Caddyfile does not name the ACME CA:\n%s", file)
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
