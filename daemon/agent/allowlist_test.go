package agent_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// rendered is a config exactly as the daemon renders it for a machine.
func rendered(t *testing.T, path string) string {
	t.Helper()
	return renderedOver(t, path, "")
}

// renderedOver is rendered for a transport (frpconf.TransportWSS: through
// the web proxy on port 443).
func renderedOver(t *testing.T, path, transport string) string {
	t.Helper()
	return renderedWith(t, path, func(p *frpconf.ClientParams) { p.Transport = transport })
}

// renderedWith is rendered with edit's changes to the parameters.
func renderedWith(t *testing.T, path string, edit func(*frpconf.ClientParams)) string {
	t.Helper()
	p := frpconf.ClientParams{
		ServerPort: 7000, ServerAddr: "vps.example.com", MachineID: 7, Secret: "s3cr3t-of-machine-7",
		SSHLocalPort: 22, TunnelPort: 20001, AgentLocalPort: 7390, AgentPort: 20002,
		Tunnels:    []store.Tunnel{{ID: 3, LocalPort: 8080, RemotePort: 20003}, {ID: 4, LocalPort: 5432, RemotePort: 20004}},
		CA:         selfSigned(t),
		ServerName: "revtunnel-server.tunnelsvc.invalid",
		ConfigPath: path,
	}
	edit(&p)
	if p.Transport == frpconf.TransportWSS {
		p.ServerPort = 443
	}
	cfg, err := frpconf.ClientConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestApplierRefusesWhatTheDaemonNeverRenders: the agent's root helper
// (`sudo tunnel-agent apply-config`, which the unprivileged user `tunnel` may
// run) installs only the shape of config the daemon renders. Every config
// below is one the real `frpc verify` accepts, and each would let `tunnel`
// make frpc read or write files (or reach hosts) it has no business with.
// Each is refused before frpc sees it, naming what is not allowed, and the
// installed config stays as it was.
func TestApplierRefusesWhatTheDaemonNeverRenders(t *testing.T) {
	_, frpc := testutil.FRP()
	dir := t.TempDir()
	path := filepath.Join(dir, "client.toml")
	inc := filepath.Join(dir, "inc")
	if err := os.Mkdir(inc, 0o700); err != nil {
		t.Fatal(err)
	}
	good := rendered(t, path)
	base := "serverAddr = \"127.0.0.1\"\nserverPort = 7000\n"
	cases := []struct{ name, config, want string }{
		{"assets dir", base + "[webServer]\nport = 7400\nassetsDir = \"/root\"\n", "webServer.assetsDir"},
		{"assets dir, other case", base + "[WebServer]\nport = 7400\nAssetsDir = \"/root\"\n", "WebServer"},
		{"log file", base + "[log]\nto = \"/etc/x\"\n", "log.to"},
		{"includes", base + "includes = [\"" + inc + "/*.toml\"]\n", "includes"},
		{"proxy plugin", base + "[[proxies]]\nname = \"files\"\ntype = \"tcp\"\nremotePort = 20009\n[proxies.plugin]\ntype = \"static_file\"\nlocalPath = \"/\"\n", "proxies[0].plugin"},
		{"visitor", base + "[[visitors]]\nname = \"v\"\ntype = \"stcp\"\nserverName = \"x\"\nbindPort = 9000\n", "visitors"},
		{"admin on every interface", base + "[webServer]\naddr = \"0.0.0.0\"\nport = 7400\n", "webServer.addr"},
		{"a proxy to another host", base + "[[proxies]]\nname = \"x\"\ntype = \"tcp\"\nlocalIP = \"192.0.2.1\"\nlocalPort = 22\nremotePort = 20009\n", "proxies[0].localIP"},
		{"an http proxy", base + "[[proxies]]\nname = \"x\"\ntype = \"http\"\nlocalPort = 80\nsubdomain = \"a\"\n", "proxies[0].type"},
		{"token from a file", base + "[auth]\ntokenSource.type = \"file\"\ntokenSource.file.path = \"/etc/shadow\"\n", "auth.tokenSource"},
		{"CA file outside frpc's directory", base + "[transport.tls]\ntrustedCaFile = \"/etc/shadow\"\n", "transport.tls.trustedCaFile"},
		{"CA file climbing out", base + "[transport.tls]\ntrustedCaFile = \"" + dir + "/../../etc/shadow\"\n", "transport.tls.trustedCaFile"},
		{"template", base + "user = \"{{ .Envs.HOME }}\"\n", "template"},
		// kcp and quic are frpc transports too, on UDP, which frps here
		// does not offer; only the two the daemon renders pass.
		{"another transport", base + "[transport]\nprotocol = \"kcp\"\n", "transport.protocol"},
		// frpc reads a file with a [common] section as its legacy INI
		// format (log_file, admin assets...), whatever TOML sees in it.
		{"legacy INI hidden in a string", base + "user = '''\n[common]\nlog_file = /etc/x\n'''\n", "user"},
		{"not TOML", "{\"serverAddr\": \"127.0.0.1\", \"log\": {\"to\": \"/etc/x\"}}\n", "not TOML"},
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
				t.Fatal(err)
			}
			reloads := 0
			a := agent.Applier{FRPC: frpc, Path: path, Reload: func(context.Context) (string, error) {
				reloads++
				return "reload success", nil
			}}
			err := a.Apply(ctx, []byte(c.config))
			if !errors.Is(err, agent.ErrRefused) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Apply = %v; want refused naming %q", err, c.want)
			}
			assertFile(t, path, good)
			if reloads != 0 {
				t.Fatal("reloaded after a refused config")
			}
		})
	}
}

// selfSigned is a PEM certificate, as the tunnel CA is.
func selfSigned(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tunnel CA for tests"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// TestApplierAcceptsWhatTheDaemonRenders: the allow-list is the renderer's
// output, and the tunnel CA's shape: the PEM in metadatas.ca (the one
// multi-line string) and the config naming itself as trustedCaFile.
func TestApplierAcceptsWhatTheDaemonRenders(t *testing.T) {
	_, frpc := testutil.FRP()
	dir := t.TempDir()
	path := filepath.Join(dir, "client.toml")
	if err := os.WriteFile(path, []byte(goodConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	a := agent.Applier{FRPC: frpc, Path: path, Reload: func(context.Context) (string, error) { return "", nil }}
	// The renderer's output carries the CA: the PEM in metadatas.ca and the
	// config naming itself as trustedCaFile.
	withCA := rendered(t, path)
	if !strings.Contains(withCA, "BEGIN CERTIFICATE") || !strings.Contains(withCA, "trustedCaFile = '"+path+"'") {
		t.Fatalf("the rendered config does not pin the CA:\n%s", withCA)
	}
	good := withCA
	// The renderer's output includes frpc's reconnect tuning.
	if !strings.Contains(good, "tcpMuxKeepaliveInterval = ") {
		t.Fatalf("the rendered config has no tcpMuxKeepaliveInterval:\n%s", good)
	}
	// Through the web proxy on 443: the same pinning, another protocol.
	wss := renderedOver(t, path, frpconf.TransportWSS)
	if !strings.Contains(wss, "protocol = 'wss'") || !strings.Contains(wss, "serverPort = 443") || !strings.Contains(wss, "trustedCaFile = '"+path+"'") {
		t.Fatalf("the wss config:\n%s", wss)
	}
	// For a frpc with frp's wire protocol v2.
	v2 := renderedWith(t, path, func(p *frpconf.ClientParams) { p.WireV2 = true })
	if !strings.Contains(v2, "wireProtocol = 'v2'") {
		t.Fatalf("the wire protocol v2 config:\n%s", v2)
	}
	for _, cfg := range []string{wss, v2, good} {
		if err := a.Apply(context.Background(), []byte(cfg)); err != nil {
			t.Fatalf("refused a rendered config: %v\n%s", err, cfg)
		}
		assertFile(t, path, cfg)
	}
	// The PEM's place cannot carry anything but certificates.
	sneaky := strings.Replace(withCA, "-----END CERTIFICATE-----\n", "-----END CERTIFICATE-----\n[common]\nlog_file = /etc/x\n", 1)
	if err := a.Apply(context.Background(), []byte(sneaky)); !errors.Is(err, agent.ErrRefused) || !strings.Contains(err.Error(), "metadatas.ca must be PEM certificates") {
		t.Fatalf("a [common] line in metadatas.ca: %v", err)
	}
	assertFile(t, path, good)
}
