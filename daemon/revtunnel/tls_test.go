package revtunnel_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/daemontest"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
)

// testCA is a tunnel CA kept in a fresh store, as the daemon keeps it.
func testCA(t *testing.T) *tunnelca.Authority {
	t.Helper()
	a, _ := testCAStore(t)
	return a
}

func testCAStore(t *testing.T) (*tunnelca.Authority, *store.Store) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	st, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sealer, err := seal.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &tunnelca.Authority{Store: st, Sealer: sealer}, st
}

// deployedCert reads the certificate the deployer wrote and checks it
// against the CA the way frpc does (CA pool + server name).
func deployedCert(t *testing.T, d *revtunnel.Deployer) *x509.Certificate {
	t.Helper()
	certPEM, err := os.ReadFile(d.CertPath)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(d.KeyPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("deployed key does not match the certificate: %v", err)
	}
	if fi, _ := os.Stat(d.KeyPath); fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	cert, err := tunnelca.ParseCert(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := d.CA.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: tunnelca.ServerName, CurrentTime: d.Now()}); err != nil {
		t.Fatalf("deployed certificate does not verify against the tunnel CA: %v", err)
	}
	return cert
}

// TestCertificateLifecycle: frps's certificate is issued at the first
// reconcile, kept while more than a third of its life is left, renewed
// (with a frps restart) after, and re-issued when server_host changes. The
// CA itself lives 10 years and its key is stored sealed.
func TestCertificateLifecycle(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	ca, st := testCAStore(t)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	ca.Now = func() time.Time { return now }
	host := "vps.example.com"
	units := &fakeUnits{}
	d := &revtunnel.Deployer{
		Path: filepath.Join(root, revtunnel.ServerConfigPath), FRPS: frps, Units: units,
		Params: func(context.Context) (frpconf.ServerParams, error) { return serverParams, nil },
		CA:     ca, CertPath: filepath.Join(root, revtunnel.ServerCertPath), KeyPath: filepath.Join(root, revtunnel.ServerKeyPath),
		Host: func(context.Context) (string, error) { return host, nil },
		Now:  func() time.Time { return now },
	}
	if _, err := d.Reconcile(ctx); err != nil || len(units.restarts) != 1 {
		t.Fatalf("first reconcile: %v, restarts %v", err, units.restarts)
	}
	first := deployedCert(t, d)
	if got := first.NotAfter.Sub(now); got != tunnelca.ServerLifetime {
		t.Fatalf("server certificate lives %v, want %v", got, tunnelca.ServerLifetime)
	}
	if strings.Join(first.DNSNames, ",") != tunnelca.ServerName+",vps.example.com" {
		t.Fatalf("certificate names %v", first.DNSNames)
	}
	c, err := ca.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Cert.IsCA || c.Cert.NotAfter.Sub(now) < 10*365*24*time.Hour || c.Cert.NotAfter.Sub(now) > 3660*24*time.Hour {
		t.Fatalf("CA: IsCA %v, lives until %v", c.Cert.IsCA, c.Cert.NotAfter)
	}
	raw, _ := st.GetSetting(ctx, "tunnel_ca")
	if strings.Contains(raw, "PRIVATE KEY") || !strings.Contains(raw, `"key_sealed":"v1:`) {
		t.Fatalf("the CA key is not stored sealed: %.200s", raw)
	}

	// Day 19: 11 days (more than a third) left: kept, frps not restarted.
	now = now.Add(19 * 24 * time.Hour)
	if msg, err := d.Reconcile(ctx); err != nil || msg != "revtunnel-server configuration unchanged" || len(units.restarts) != 1 {
		t.Fatalf("day 19: %q %v %v", msg, err, units.restarts)
	}
	if deployedCert(t, d).SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatal("certificate replaced with more than a third of its life left")
	}
	// Day 21: 9 days left: renewed, frps restarted to load it.
	now = now.Add(2 * 24 * time.Hour)
	msg, err := d.Reconcile(ctx)
	if err != nil || !strings.Contains(msg, "certificate renewed") || !strings.Contains(msg, "less than a third") || len(units.restarts) != 2 {
		t.Fatalf("day 21: %q %v %v", msg, err, units.restarts)
	}
	second := deployedCert(t, d)
	if second.SerialNumber.Cmp(first.SerialNumber) == 0 || second.NotAfter.Sub(now) != tunnelca.ServerLifetime {
		t.Fatal("certificate not renewed")
	}
	// A new server host (an IP this time) re-issues it at once.
	host = "203.0.113.10"
	if msg, err := d.Reconcile(ctx); err != nil || !strings.Contains(msg, "certificate renewed") || len(units.restarts) != 3 {
		t.Fatalf("server_host change: %q %v %v", msg, err, units.restarts)
	}
	third := deployedCert(t, d)
	if len(third.IPAddresses) != 1 || third.IPAddresses[0].String() != "203.0.113.10" || strings.Join(third.DNSNames, ",") != tunnelca.ServerName {
		t.Fatalf("after server_host change: DNS %v IP %v", third.DNSNames, third.IPAddresses)
	}
	// A key file that does not match (damaged, replaced) is re-issued too.
	os.WriteFile(d.KeyPath, []byte("junk"), 0o600)
	if msg, err := d.Reconcile(ctx); err != nil || !strings.Contains(msg, "key file") || len(units.restarts) != 4 {
		t.Fatalf("bad key: %q %v %v", msg, err, units.restarts)
	}
	deployedCert(t, d)
	// Another daemon loading the same store gets the same CA.
	again, err := (&tunnelca.Authority{Store: st, Sealer: ca.Sealer}).Load(ctx)
	if err != nil || again.Fingerprint() != c.Fingerprint() {
		t.Fatalf("CA changed between loads: %v", err)
	}
}

// selfSigned writes a certificate for tunnelca.ServerName and 127.0.0.1
// that no tunnel CA issued: what an impostor frps would serve.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: tunnelca.ServerName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{tunnelca.ServerName}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "impostor.crt"), filepath.Join(dir, "impostor.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	return certFile, keyFile
}

// TestImpostorServerGetsNoLogin runs a real frps with its own certificate
// (naming our server name, but not issued by the tunnel CA) whose plugin
// would let anyone in, and points a machine's frpc, with the config the
// daemon rendered, at it: frpc refuses the certificate, so the impostor
// never sees a Login and the machine's secret never leaves it. The same
// config pointed at the real frps (certificate from the tunnel CA)
// connects and carries bytes.
func TestImpostorServerGetsNoLogin(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ca, st := testCAStore(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	echoPort := echoServer(t)
	lo := testutil.TunnelPorts(t)
	ports := store.PortRange{Lo: lo, Hi: lo + 19}
	realPort, impostorPort := freePort(t), freePort(t)

	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sp, _ := ssh.NewPublicKey(pub)
	svc := &machines.Service{
		Store: st, Sealer: ca.Sealer, Keys: keys{string(ssh.MarshalAuthorizedKey(sp))}, Log: log, Limiter: auth.NewLimiter(nil),
		Ports: ports, Reach: installedReach(t, st, "127.0.0.1"), FRPSPort: impostorPort, SSHLocalPort: echoPort,
		ClientAdminPort: freePort(t),
	}
	tok, err := svc.CreateToken(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := svc.Bootstrap(ctx, machines.BootstrapRequest{Token: tok.Token, Name: "victim", Username: "pi", FallbackHost: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	_, secret := loginOf(reg.ClientConfig)

	// The impostor: real frps, own certificate, a plugin that records every
	// call and allows it.
	var mu sync.Mutex
	var calls []string
	recorder := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		calls = append(calls, string(body))
		mu.Unlock()
		w.Write([]byte(`{"reject":false,"unchange":true}`))
	}))
	t.Cleanup(recorder.Close)
	certFile, keyFile := selfSigned(t, dir)
	impConf, err := frpconf.ServerConfig(frpconf.ServerParams{
		BindPort: impostorPort, PluginAddr: strings.TrimPrefix(recorder.URL, "http://"),
		Ports: ports, CertFile: certFile, KeyFile: keyFile,
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	impPath := filepath.Join(dir, "impostor.toml")
	os.WriteFile(impPath, []byte(impConf), 0o600)
	impostor := start(t, "impostor frps", frps, "-c", impPath)
	testutil.WaitListening(t, impostorPort, 10*time.Second)

	clientPath := filepath.Join(dir, "client.toml")
	conf := daemontest.InstallClientConfig(t, reg.ClientConfig, clientPath)
	victim := start(t, "frpc", frpc, "-c", clientPath)
	select {
	case <-victim.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("frpc kept running against the impostor")
	}
	// frpc multiplexes its control session over the TLS connection, so
	// the handshake failure reaches its log either in x509's words or as
	// the session shutting down, before any login.
	if out := victim.Out.String(); !strings.Contains(out, "login to the server failed") ||
		!(strings.Contains(out, "certificate signed by unknown authority") || strings.Contains(out, "session shutdown")) {
		t.Fatalf("frpc did not fail its TLS handshake with the impostor:\n%s", out)
	}
	// The same check frpc makes (CA pool read from the config file, the
	// pinned server name), in Go's words: the impostor's certificate fails.
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(conf)) {
		t.Fatal("no CA in the installed config")
	}
	_, err = tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", impostorPort), &tls.Config{RootCAs: pool, ServerName: tunnelca.ServerName})
	if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("TLS to the impostor with the pinned CA: %v", err)
	}
	mu.Lock()
	got := append([]string(nil), calls...)
	mu.Unlock()
	if len(got) != 0 {
		t.Fatalf("the impostor's plugin received %d calls, first: %.300s", len(got), got[0])
	}
	if out := impostor.Out.String(); strings.Contains(out, "login") || strings.Contains(out, secret) {
		t.Fatalf("the impostor logged a login or the secret:\n%s", out)
	}

	// The real frps, with the tunnel CA's certificate: same config, connects.
	plugin := httptest.NewServer(&revtunnel.Plugin{Store: st, Log: log})
	t.Cleanup(plugin.Close)
	d := &revtunnel.Deployer{
		Path: filepath.Join(dir, "root", revtunnel.ServerConfigPath), FRPS: frps,
		CA:       ca,
		CertPath: filepath.Join(dir, "root", revtunnel.ServerCertPath), KeyPath: filepath.Join(dir, "root", revtunnel.ServerKeyPath),
		Host: func(context.Context) (string, error) { return "127.0.0.1", nil },
	}
	d.Params = func(context.Context) (frpconf.ServerParams, error) {
		return frpconf.ServerParams{BindPort: realPort, PluginAddr: strings.TrimPrefix(plugin.URL, "http://"),
			Ports: ports, CertFile: d.CertPath, KeyFile: d.KeyPath}, nil
	}
	if _, err := d.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	start(t, "frps", frps, "-c", d.Path)
	testutil.WaitListening(t, realPort, 10*time.Second)
	conf = strings.Replace(conf, fmt.Sprintf("serverPort = %d", impostorPort), fmt.Sprintf("serverPort = %d", realPort), 1)
	os.WriteFile(clientPath, []byte(conf), 0o600)
	start(t, "frpc", frpc, "-c", clientPath)
	eventually(t, 15*time.Second, "bytes through the tunnel of the pinned frpc", func() error { return echo(reg.TunnelPort) })
}

// TestConcurrentReconcilesKeepKeyAndCertificateTogether: the daemon
// reconciles from several places at once (start, the renewal loop,
// settings changes); the deployed key always matches the certificate.
func TestConcurrentReconcilesKeepKeyAndCertificateTogether(t *testing.T) {
	for round := 0; round < 5; round++ {
		root := t.TempDir()
		host := 0
		var hmu sync.Mutex
		d := &revtunnel.Deployer{
			Path: filepath.Join(root, revtunnel.ServerConfigPath), FRPS: frps,
			Params: func(context.Context) (frpconf.ServerParams, error) { return serverParams, nil },
			CA:     testCA(t), CertPath: filepath.Join(root, revtunnel.ServerCertPath), KeyPath: filepath.Join(root, revtunnel.ServerKeyPath),
			// Every reconcile sees a new server host, so every one issues.
			Host: func(context.Context) (string, error) {
				hmu.Lock()
				defer hmu.Unlock()
				host++
				return fmt.Sprintf("h%d.example.com", host), nil
			},
		}
		var wg sync.WaitGroup
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); d.Reconcile(context.Background()) }()
		}
		wg.Wait()
		certPEM, _ := os.ReadFile(d.CertPath)
		keyPEM, _ := os.ReadFile(d.KeyPath)
		if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			t.Fatalf("round %d: deployed key and certificate differ: %v", round, err)
		}
	}
}

// procUnits restarts a real frps process, as systemd restarts
// revtunnel-server.service.
type procUnits struct {
	t    *testing.T
	conf string
	mu   sync.Mutex
	proc *testutil.Proc
}

func (u *procUnits) Restart(_ context.Context, name string) error {
	if name != revtunnel.ServerUnit {
		return fmt.Errorf("unexpected unit %s", name)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.proc != nil {
		u.proc.Stop()
	}
	u.proc = start(u.t, "frps", frps, "-c", u.conf)
	return nil
}

// servedSerial is the serial of the certificate frps presents, checked
// against the CA pinned in a machine's config.
func servedSerial(conf string, port int) (string, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(conf))
	c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: pool, ServerName: tunnelca.ServerName})
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// TestRenewalReachesMachines: when the certificate is renewed, frps is
// restarted on it and a machine's frpc, pinned to the CA, reconnects by
// itself and carries bytes again.
func TestRenewalReachesMachines(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ca, st := testCAStore(t)
	// The first certificate was issued 21 days ago (9 of 30 days left).
	now := time.Now().Add(-21 * 24 * time.Hour)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lo := testutil.TunnelPorts(t)
	ports := store.PortRange{Lo: lo, Hi: lo + 19}
	frpsPort := freePort(t)
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sp, _ := ssh.NewPublicKey(pub)
	svc := &machines.Service{
		Store: st, Sealer: ca.Sealer, Keys: keys{string(ssh.MarshalAuthorizedKey(sp))}, Log: log, Limiter: auth.NewLimiter(nil),
		Ports: ports, Reach: installedReach(t, st, "127.0.0.1"), FRPSPort: frpsPort, SSHLocalPort: echoServer(t), ClientAdminPort: freePort(t),
	}
	plugin := httptest.NewServer(&revtunnel.Plugin{Store: st, Log: log})
	t.Cleanup(plugin.Close)
	units := &procUnits{t: t, conf: filepath.Join(dir, "root", revtunnel.ServerConfigPath)}
	d := &revtunnel.Deployer{
		Path: units.conf, FRPS: frps, Units: units, CA: ca, Now: func() time.Time { return now },
		CertPath: filepath.Join(dir, "root", revtunnel.ServerCertPath), KeyPath: filepath.Join(dir, "root", revtunnel.ServerKeyPath),
	}
	d.Params = func(context.Context) (frpconf.ServerParams, error) {
		return frpconf.ServerParams{BindPort: frpsPort, PluginAddr: strings.TrimPrefix(plugin.URL, "http://"),
			Ports: ports, CertFile: d.CertPath, KeyFile: d.KeyPath}, nil
	}
	if _, err := d.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitListening(t, frpsPort, 10*time.Second)
	tok, _ := svc.CreateToken(ctx, 0)
	reg, err := svc.Bootstrap(ctx, machines.BootstrapRequest{Token: tok.Token, Name: "m", Username: "pi", FallbackHost: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	conf := daemontest.InstallClientConfig(t, reg.ClientConfig, filepath.Join(dir, "client.toml"))
	start(t, "frpc", frpc, "-c", filepath.Join(dir, "client.toml"))
	eventually(t, 15*time.Second, "bytes through the tunnel", func() error { return echo(reg.TunnelPort) })
	before, err := servedSerial(conf, frpsPort)
	if err != nil {
		t.Fatal(err)
	}

	// Today, day 21 of 30: the renewal loop's reconcile renews and
	// restarts frps.
	now = time.Now()
	msg, err := d.Reconcile(ctx)
	if err != nil || !strings.Contains(msg, "certificate renewed") {
		t.Fatalf("renewal: %q %v", msg, err)
	}
	testutil.WaitListening(t, frpsPort, 10*time.Second)
	after, err := servedSerial(conf, frpsPort)
	if err != nil || after == before {
		t.Fatalf("frps serves serial %s (before %s): %v", after, before, err)
	}
	took := eventually(t, 60*time.Second, "bytes through the tunnel after the renewal", func() error { return echo(reg.TunnelPort) })
	t.Logf("the machine carried bytes again %v after frps restarted on the renewed certificate", took.Round(time.Millisecond))
}
