package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
)

// joinEnv is the machines environment with the set-up settings wired, as
// the daemon runs.
func joinEnv(t *testing.T) (*machinesEnv, localsetup.Settings) {
	return joinEnvFlags(t, "", "")
}

// joinEnvFlags is joinEnv with the daemon started with --base-url and
// --server-host (unset when "").
func joinEnvFlags(t *testing.T, baseURL, serverHost string) (*machinesEnv, localsetup.Settings) {
	e := newMachinesEnvWith(t, sqliteEngine, wide, func(c *config.Config) { c.BaseURL, c.ServerHost = baseURL, serverHost })
	return e, e.app.Setup.Settings
}

// TestJoinCommandAddress: the token's command names an address machines can
// reach (--base-url, then router.<domain> once the proxy is installed, then
// the server host), whatever address the operator opened the dashboard at;
// with none known it says what to set.
func TestJoinCommandAddress(t *testing.T) {
	installed := time.Unix(1_700_000_000, 0)
	cases := []struct {
		name       string
		baseURL    string
		serverHost string // --server-host
		vps        *localsetup.VPS
		domainOnly string // POST /api/local/skip's domain, nothing installed
		want       string
		warn       bool
	}{
		{name: "nothing known", want: "http://127.0.0.1:7380", warn: true},
		{name: "domain saved, proxy not installed", domainOnly: "example.com", want: "http://127.0.0.1:7380", warn: true},
		{name: "proxy installed", vps: &localsetup.VPS{Domain: "example.com", ServerHost: "router.example.com", InstalledAt: installed},
			want: "https://router.example.com"},
		{name: "base URL wins over the proxy", baseURL: "https://tunnels.example.org:8443",
			vps:  &localsetup.VPS{Domain: "example.com", ServerHost: "router.example.com", InstalledAt: installed},
			want: "https://tunnels.example.org:8443"},
		{name: "proxy skipped: server host", vps: &localsetup.VPS{ServerHost: "203.0.113.5", SkipWebproxy: true, InstalledAt: installed},
			want: "http://203.0.113.5:7380"},
		{name: "proxy skipped: IPv6 server host", vps: &localsetup.VPS{ServerHost: "2001:db8::5", SkipWebproxy: true, InstalledAt: installed},
			want: "http://[2001:db8::5]:7380"},
		{name: "install still running: server host", vps: &localsetup.VPS{Domain: "example.com", ServerHost: "vps.example.com"},
			want: "http://vps.example.com:7380"},
		{name: "--server-host alone", serverHost: "vps.example.net", want: "http://vps.example.net:7380"},
		{name: "install's server host wins over --server-host", serverHost: "vps.example.net",
			vps:  &localsetup.VPS{ServerHost: "203.0.113.5", SkipWebproxy: true, InstalledAt: installed},
			want: "http://203.0.113.5:7380"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, settings := joinEnvFlags(t, c.baseURL, c.serverHost)
			ctx := context.Background()
			if c.vps != nil {
				if err := settings.SaveVPS(ctx, *c.vps); err != nil {
					t.Fatal(err)
				}
			}
			if c.domainOnly != "" {
				if err := settings.SetDomain(ctx, c.domainOnly); err != nil {
					t.Fatal(err)
				}
			}
			// The operator reached the dashboard through an SSH forward.
			d := e.data(t, e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{}`, cookie: e.cookie,
				header: map[string]string{"Host": "127.0.0.1:7380"}}), 200)
			// The shell would expand an IPv6 URL's brackets: it comes quoted.
			url := c.want + "/static/bootstrap.sh"
			if strings.ContainsAny(url, "[]") {
				url = "'" + url + "'"
			}
			want := "curl -fsSL " + url + " -o bootstrap.sh && bash bootstrap.sh " + d["token"].(string)
			if d["command"] != want {
				t.Fatalf("command = %q, want %q", d["command"], want)
			}
			warning, has := d["warning"].(string)
			if has != c.warn {
				t.Fatalf("warning = %q, want one: %t", warning, c.warn)
			}
			if c.warn && (!strings.Contains(warning, "--base-url") || !strings.Contains(warning, c.want)) {
				t.Fatalf("the warning does not say what to set: %q", warning)
			}
		})
	}
}

// TestJoinCommandRefusesUnsafeHost: a request Host (with no address known)
// or a --base-url that is not a plain scheme://host[:port] makes no command
// (it would be pasted into a shell) and no token.
func TestJoinCommandRefusesUnsafeHost(t *testing.T) {
	e, _ := joinEnv(t)
	wantError(t, e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{}`, cookie: e.cookie,
		header: map[string]string{"Host": "x;touch${IFS}pwned"}}), 400,
		`cannot build the join command from the address "http://x;touch${IFS}pwned": set --base-url to the address machines use (scheme://host[:port])`)
	e, _ = joinEnvFlags(t, "https://tunnels.example.org/$(id)", "")
	wantError(t, e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{}`, cookie: e.cookie}), 400,
		`cannot build the join command from --base-url "https://tunnels.example.org/$(id)": give it as scheme://host[:port]`)
	if l := e.list(t, "/api/bootstrap/tokens"); len(l) != 0 {
		t.Fatalf("a token was made: %v", l)
	}
}

// TestJoinCommandDashboardPort: with a server host, the command uses the
// port the dashboard really answered on, not the --listen default.
func TestJoinCommandDashboardPort(t *testing.T) {
	e, settings := joinEnv(t)
	if err := settings.SaveVPS(context.Background(), localsetup.VPS{ServerHost: "203.0.113.5", SkipWebproxy: true}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(checkedHandler(t, e.srv))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	r, _ := http.NewRequest("POST", srv.URL+"/api/bootstrap/tokens", strings.NewReader(`{}`))
	r.AddCookie(&http.Cookie{Name: SessionCookie, Value: e.cookie})
	resp, err := srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Data struct{ Command, Warning string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	if want := fmt.Sprintf("curl -fsSL http://203.0.113.5:%d/static/bootstrap.sh ", port); !strings.HasPrefix(body.Data.Command, want) || body.Data.Warning != "" {
		t.Fatalf("command %q (warning %q), want it to start with %q", body.Data.Command, body.Data.Warning, want)
	}
}
