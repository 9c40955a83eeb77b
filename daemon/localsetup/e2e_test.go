package localsetup_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/daemontest"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

var frps, frpc, pebbleBin string

func TestMain(m *testing.M) {
	auth.LowCostForTests()
	frps, frpc = testutil.FRP()
	pebbleBin = testutil.PebbleBin()
	os.Exit(m.Run())
}

// webApp is a daemon (daemontest) with the domain example.test, and a
// machine "nas" joined to it whose HTTP tunnel sub, also served at its own
// domains, leads to a web app on the machine's loopback that answers
// "<answer>, path <path>", through real frps and frpc. Everything the
// operator does goes through the API.
type webApp struct {
	d      *daemontest.Daemon
	c      *daemontest.Client
	tunnel int64
}

func newWebApp(t *testing.T, sub, answer string, domains ...string) *webApp {
	t.Helper()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s, path %s", answer, r.URL.Path)
	}))
	t.Cleanup(web.Close)
	d := daemontest.Start(t, daemontest.Options{})
	c := d.Setup(t)
	d.RunFRPS(t)
	if code, body := c.Call("POST", "/api/local/skip", map[string]string{"domain": "example.test"}, nil); code != 200 {
		t.Fatalf("domain: %d %s", code, body)
	}
	nas := d.Join(t, c, "nas")
	in := map[string]any{"machine_id": nas.ID, "name": sub, "kind": "http", "local_port": web.Listener.Addr().(*net.TCPAddr).Port, "subdomain": sub}
	if len(domains) > 0 {
		in["domains"] = domains
	}
	var tun struct {
		ID         int64 `json:"id"`
		RemotePort int   `json:"remote_port"`
	}
	if code, body := c.Call("POST", "/api/tunnels", in, &tun); code != 201 {
		t.Fatalf("create tunnel: %d %s", code, body)
	}
	var conf string
	if code, _ := c.Call("GET", fmt.Sprintf("/api/machines/%d/revtunnel-client", nas.ID), nil, &conf); code != 200 {
		t.Fatalf("client config: %d %s", code, conf)
	}
	d.RunFRPC(t, "nas", conf, 0)
	testutil.WaitListening(t, tun.RemotePort, 10*time.Second)
	return &webApp{d: d, c: c, tunnel: tun.ID}
}

// daemonCaddyfile is the Caddyfile d renders for its web proxy, with
// edit's changes for a test (loopback ports instead of 80 and 443, no
// admin endpoint), checked by the real caddy.
func daemonCaddyfile(t *testing.T, d *daemontest.Daemon, edit func(*webproxy.Input)) []byte {
	t.Helper()
	ctx := context.Background()
	setup := d.App.Setup
	in, ok, err := setup.ProxyInput(ctx)
	if err != nil || !ok {
		t.Fatalf("proxy input: %v %v", ok, err)
	}
	in.Admin = "off"
	edit(&in)
	file, err := webproxy.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := setup.Proxy.Validate(ctx, file); err != nil {
		t.Fatalf("caddy refused the rendered file: %v\n%s", err, file)
	}
	return file
}

// TestCaddyInFrontOfRealTunnel: a machine registers, gets an HTTP tunnel to
// its local web server, and a real caddy running the Caddyfile the daemon
// rendered serves that web server at <sub>.<domain> through real frps and
// frpc. Renaming the tunnel's subdomain moves the site.
func TestCaddyInFrontOfRealTunnel(t *testing.T) {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Skip("caddy is not installed (scripts/install-deps.sh installs it)")
	}
	w := newWebApp(t, "files", "machine web app")
	dir := w.d.Dir
	caddyPort := testutil.FreePort(t)
	file := daemonCaddyfile(t, w.d, func(in *webproxy.Input) { in.PlainHTTPPort, in.WSS = caddyPort, nil }) // plain HTTP: no wss site
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

	// Once the proxy is installed, the daemon keeps its Caddyfile as the
	// database says: renaming the tunnel's subdomain redeploys it.
	// (What the installation records; the install itself needs systemd.)
	setup := w.d.App.Setup
	if err := setup.Settings.SaveVPS(context.Background(), localsetup.VPS{Domain: "example.test", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if code, body := w.c.Call("PATCH", fmt.Sprintf("/api/tunnels/%d", w.tunnel), map[string]any{"subdomain": "docs"}, nil); code != 200 {
		t.Fatalf("rename: %d %s", code, body)
	}
	took := testutil.Eventually(t, 10*time.Second, "Caddyfile follows the rename", func() error {
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
