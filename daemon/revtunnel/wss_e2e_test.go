package revtunnel_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

// chooseTransport is what bootstrap.sh does when the tunnel server's port
// is closed to the machine: POST /api/machines/transport with its agent
// token. It returns the status and the answer's data.
func chooseTransport(t *testing.T, base, agentToken, transport string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/api/machines/transport", strings.NewReader(`{"transport":"`+transport+`"}`))
	req.Header.Set("Authorization", "Bearer "+agentToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var env struct {
		Data  map[string]any `json:"data"`
		Error string         `json:"error"`
	}
	raw, _ := io.ReadAll(resp.Body)
	json.Unmarshal(raw, &env)
	if env.Data == nil {
		env.Data = map[string]any{"error": env.Error}
	}
	return resp.StatusCode, env.Data
}

// TestRealEngineWSS: a machine on the wss transport reaches the tunnel
// server through a real Caddy serving the Caddyfile the daemon renders,
// with a real frpc and frps: frpc pins the tunnel CA through Caddy as it
// does directly, the daemon's bridge carries its connection on to frps
// over TLS, and the machine's SSH port carries bytes. The machine shows
// it connected over 443 from its own address; a client that pins another
// CA is refused by the TLS handshake, before it sends its credential.
func TestRealEngineWSS(t *testing.T) {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Skip("caddy is not installed (scripts/install-deps.sh installs it)")
	}
	e := startEngine(t)
	// The gate listener, where the wss site sends /~!frp.
	gate := httptest.NewServer(e.d.App.Bridge)
	t.Cleanup(gate.Close)
	wss := &revtunnel.WSSCert{CA: e.d.App.Revtunnel.CA, CertPath: filepath.Join(e.dir, "wss.crt"), KeyPath: filepath.Join(e.dir, "wss.key")}
	site, err := wss.Site(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	httpsPort, httpPort := testutil.FreePort(t), testutil.FreePort(t)
	// Automatic HTTPS is on (the wss site needs it); its ACME CA is a
	// closed port on loopback, so the dashboard's certificate is never
	// obtained and nothing leaves this machine.
	file, err := webproxy.Render(webproxy.Input{Domain: "example.test", Dashboard: "127.0.0.1:9", Gate: strings.TrimPrefix(gate.URL, "http://"),
		WSS: site, HTTPPort: httpPort, HTTPSPort: httpsPort, Admin: "off", ACMECA: fmt.Sprintf("https://127.0.0.1:%d/dir", testutil.FreePort(t))})
	if err != nil {
		t.Fatal(err)
	}
	testutil.StartCaddy(t, file, httpsPort)
	e.d.App.Machines.WSSPort = httpsPort // the web proxy's 443, here on a free port

	reg := e.register("behind-443")
	code, got := chooseTransport(t, e.anon.Base, reg.AgentToken, "wss")
	if code != 200 || got["transport"] != "wss" {
		t.Fatalf("POST /api/machines/transport: %d %v", code, got)
	}
	conf, _ := got["revtunnel_client_config"].(string)
	if !strings.Contains(conf, "protocol = 'wss'") || !strings.Contains(conf, fmt.Sprintf("serverPort = %d", httpsPort)) {
		t.Fatalf("the wss config:\n%s", conf)
	}
	m := e.machineByName("behind-443")
	if tr, _ := m["transport"].(map[string]any); tr["configured"] != "wss" || tr["seen"] != "" || !strings.Contains(fmt.Sprint(tr["summary"]), "not connected yet") {
		t.Fatalf("transport before the first login: %v", m["transport"])
	}
	if cfg, _ := m["config"].(map[string]any); cfg["desired_generation"] != float64(2) {
		t.Fatalf("the transport change is not a new generation: %v", m["config"])
	}

	client := e.runClient("behind-443", conf)
	took := eventually(t, 20*time.Second, "bytes through the ssh tunnel port of a machine on wss", func() error { return echo(reg.TunnelPort) })
	t.Logf("the wss machine's ssh tunnel carried bytes %v after frpc started", took.Round(time.Millisecond))
	eventually(t, 5*time.Second, "the machine shows it connected over 443", func() error {
		m := e.machineByName("behind-443")
		tr, _ := m["transport"].(map[string]any)
		if m["status"] != "online" || tr["seen"] != "wss" || tr["addr"] != "127.0.0.1" ||
			tr["summary"] != "connected over port 443 (wss, through the web proxy) from 127.0.0.1" {
			return fmt.Errorf("machine %v, transport %v", m["status"], tr)
		}
		return nil
	})
	if err := e.hasEvent(revtunnel.EventConnected, `"behind-443" connected from 127.0.0.1 (over wss)`); err != nil {
		t.Fatal(err)
	}
	if err := e.hasEvent("transport_changed", `"behind-443" now reaches the tunnel server over port 443`); err != nil {
		t.Fatal(err)
	}

	// Anything else on the wss site is not found, and the bridge takes
	// only the tunnel server's name and a WebSocket.
	pool := x509.NewCertPool()
	ca, _ := e.d.App.Revtunnel.CA.Load(e.ctx)
	pool.AppendCertsFromPEM(ca.CertPEM)
	https := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: tunnelca.ServerName}}}
	get := func(path string) (*http.Response, error) {
		// As frpc asks: the tunnel server's name in SNI and Host.
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://127.0.0.1:%d%s", httpsPort, path), nil)
		req.Host = tunnelca.ServerName
		return https.Do(req)
	}
	resp, err := get("/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("GET / on the wss site: %d", resp.StatusCode)
	}
	resp, err = get("/~!frp")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), "only a tunnel client") {
		t.Fatalf("GET /~!frp without a WebSocket: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("GET", gate.URL+"/~!frp", nil)
	req.Host = "router.example.test"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 404 {
		t.Fatalf("the bridge under another name: %v %v", resp, err)
	}

	// A client that pins another CA stops at the TLS handshake with Caddy.
	certFile, _ := selfSigned(t, t.TempDir())
	otherPEM, _ := os.ReadFile(certFile)
	other := strings.Replace(conf, strings.TrimSpace(string(ca.CertPEM)), strings.TrimSpace(string(otherPEM)), 1)
	if other == conf {
		t.Fatal("the config does not carry the tunnel CA")
	}
	impostor := e.runClient("other-ca", other)
	eventually(t, 15*time.Second, "frpc refusing the wss site's certificate", func() error {
		if !strings.Contains(impostor.Out.String(), "certificate signed by unknown authority") {
			return fmt.Errorf("frpc said:\n%s", impostor.Out.String())
		}
		return nil
	})
	impostor.Stop()

	// Back to the direct transport: the next config dials frps's port.
	code, got = chooseTransport(t, e.anon.Base, reg.AgentToken, "tcp")
	direct, _ := got["revtunnel_client_config"].(string)
	if code != 200 || strings.Contains(direct, "wss") || !strings.Contains(direct, fmt.Sprintf("serverPort = %d", e.frpsPort)) {
		t.Fatalf("back to tcp: %d\n%s", code, direct)
	}
	client.Stop()
	e.runClient("behind-443", direct)
	eventually(t, 20*time.Second, "the machine connected directly again", func() error {
		tr, _ := e.machineByName("behind-443")["transport"].(map[string]any)
		if tr["seen"] != "tcp" || tr["configured"] != "tcp" || echo(reg.TunnelPort) != nil {
			return fmt.Errorf("transport %v", tr)
		}
		return nil
	})

	// Bad input changes nothing.
	for _, c := range []struct {
		token, transport string
		want             int
	}{{reg.AgentToken, "kcp", 400}, {"not-a-token", "wss", 401}} {
		if code, got := chooseTransport(t, e.anon.Base, c.token, c.transport); code != c.want {
			t.Fatalf("transport %q with token %q: %d %v", c.transport, c.token, code, got)
		}
	}
	if tr, _ := e.machineByName("behind-443")["transport"].(map[string]any); tr["configured"] != "tcp" {
		t.Fatalf("a refused change changed the transport: %v", tr)
	}
}
