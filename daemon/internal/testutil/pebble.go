package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// PebbleBin returns the pinned bin/pebble (Let's Encrypt's ACME test
// server), running `make pebble` first when it or ChallTestSrvBin is
// missing. Call it from
// TestMain; it exits the test binary when the build fails.
func PebbleBin() string {
	root, err := RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin := filepath.Join(root, "bin", "pebble")
	if !exists(bin) || !exists(ChallTestSrvBin()) {
		fmt.Fprintln(os.Stderr, "bin/pebble missing; running `make pebble`")
		cmd := exec.Command("make", "-C", root, "pebble")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "these tests need pebble: `make pebble` failed: %v\n", err)
			os.Exit(1)
		}
	}
	return bin
}

// ChallTestSrvBin is bin/pebble-challtestsrv, Pebble's test DNS (and
// challenge) server, which `make pebble` builds with Pebble.
func ChallTestSrvBin() string {
	root, err := RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return filepath.Join(root, "bin", "pebble-challtestsrv")
}

// QuietPort is FreePort: a reserved port below Linux's ephemeral range.
func QuietPort(t testing.TB) int {
	t.Helper()
	return FreePort(t)
}

// Pebble is a running ACME server on loopback.
type Pebble struct {
	// Directory is the ACME directory URL (https, served under DirRoot).
	Directory string
	// DirRootFile is a PEM file of the root Pebble's own HTTPS listener
	// chains to: what an ACME client must trust to talk to it.
	DirRootFile string
	mgmt        string
	client      *http.Client
}

// PebbleOptions say where Pebble's validation authority checks challenges.
type PebbleOptions struct {
	// HTTPPort and TLSPort are where HTTP-01 and TLS-ALPN-01 challenges are
	// fetched (the ACME client's loopback ports).
	HTTPPort, TLSPort int
	// DNSServer (host:port) resolves the names being validated.
	DNSServer string
}

// StartPebble runs bin on loopback with a directory certificate made for
// this test, and real challenge validation against o's ports and DNS
// server. It is stopped at cleanup.
func StartPebble(t testing.TB, bin string, o PebbleOptions) *Pebble {
	t.Helper()
	dir := t.TempDir()
	rootPEM, certPEM, keyPEM := loopbackCA(t)
	p := &Pebble{DirRootFile: filepath.Join(dir, "dir-root.pem")}
	for name, b := range map[string][]byte{p.DirRootFile: rootPEM, filepath.Join(dir, "cert.pem"): certPEM, filepath.Join(dir, "key.pem"): keyPEM} {
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port, mgmt := QuietPort(t), QuietPort(t)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":                  fmt.Sprintf("127.0.0.1:%d", port),
		"managementListenAddress":        fmt.Sprintf("127.0.0.1:%d", mgmt),
		"certificate":                    filepath.Join(dir, "cert.pem"),
		"privateKey":                     filepath.Join(dir, "key.pem"),
		"httpPort":                       o.HTTPPort,
		"tlsPort":                        o.TLSPort,
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
		// No Retry-After: Pebble sends it half the time as an HTTP date,
		// which Debian's caddy 2.6 refuses ("invalid Retry-After header")
		// and then waits a minute before it tries again.
		"retryAfter": map[string]int{"authz": 0, "order": 0},
	}}
	b, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// No random sleep before validating, and no deliberately refused
	// nonces: the client's retries are not what these tests are about.
	// Challenges are still really validated (no PEBBLE_VA_ALWAYS_VALID).
	t.Setenv("PEBBLE_VA_NOSLEEP", "1")
	t.Setenv("PEBBLE_WFE_NONCEREJECT", "0")
	proc := Start(t, "pebble", bin, "-config", cfgPath, "-dnsserver", o.DNSServer)
	p.Directory = fmt.Sprintf("https://127.0.0.1:%d/dir", port)
	p.mgmt = fmt.Sprintf("https://127.0.0.1:%d", mgmt)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(rootPEM)
	p.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	Eventually(t, 15*time.Second, "pebble's directory answers", func() error {
		if !proc.Running() {
			return fmt.Errorf("pebble exited:\n%s", proc.Out.String())
		}
		resp, err := p.client.Get(p.Directory)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	return p
}

// IssuingRoot returns the PEM of the root Pebble signs certificates under
// (its management endpoint /roots/0); it is made anew at each start.
func (p *Pebble) IssuingRoot(t testing.TB) []byte {
	t.Helper()
	resp, err := p.client.Get(p.mgmt + "/roots/0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("pebble /roots/0: %d %v", resp.StatusCode, err)
	}
	return b
}

// loopbackCA makes a root and a leaf for localhost and 127.0.0.1 signed by
// it, all as PEM.
func loopbackCA(t testing.TB) (rootPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tunnelsvc test ACME directory root"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalPKCS8PrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})
}
