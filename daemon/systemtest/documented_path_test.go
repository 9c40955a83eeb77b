package systemtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testbed"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

const (
	docVPSIP     = "10.213.12.1"
	docMachineIP = "10.213.12.2"
	// The machine behind a firewall that lets only 443 out, on a link of
	// its own.
	docVPSIP443     = "10.213.13.1"
	docMachine443IP = "10.213.13.2"
	docDomain       = "example.test"
	docNewDomain    = "new.test"
	// Pebble, inside the VPS, on its loopback.
	docPebbleDir  = "https://127.0.0.1:14000/dir"
	docPebbleMgmt = "https://127.0.0.1:15000"
	// Where the operator puts the root Pebble's own HTTPS listener chains
	// to, as docs/install.md suggests (caddy reads it).
	docACMERoot = "/etc/tunnelsvc/acme-ca-root.pem"
)

// pebbleTestCerts is the directory of Pebble's own test certificates in
// the module cache: a certificate for localhost and 127.0.0.1 and the
// root it chains to (test/certs/pebble.minica.pem). `go mod download`
// fetches the module when the cache does not hold it yet (a new machine):
// `go list -m` would then answer an empty directory.
func pebbleTestCerts(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/letsencrypt/pebble/v2")
	cmd.Dir = filepath.Join(testbed.Root(t), "tools", "pebble")
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if err == nil {
		err = json.Unmarshal(out, &mod)
	}
	if err != nil || mod.Error != "" || mod.Dir == "" {
		t.Fatalf("pebble's module (tools/pebble/go.mod): %v %s\n%s", err, mod.Error, out)
	}
	return filepath.Join(mod.Dir, "test", "certs")
}

// listData is GET path's data array.
func (v *vps) listData(path string) []map[string]any {
	v.t.Helper()
	a := v.do("GET", path, "")
	var body struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal([]byte(a.raw), &body); err != nil || a.status != 200 {
		v.t.Fatalf("GET %s: %d %s", path, a.status, a.raw)
	}
	return body.Data
}

// TestDocumentedPath follows only what README.md "First setup" and
// docs/install.md tell an operator, on the installed package, with no flag
// and nothing in tunnelsvc.env: set the password, point the ACME CA at a
// private CA (Pebble, standing in for Let's Encrypt), install with a
// domain and no server host, and run the join command the dashboard shows
// on a machine that resolves router.<domain> to the VPS and trusts the
// CA's root. What a user sees:
//
//   - the join command is `curl -fsSL https://router.<domain>/static/bootstrap.sh
//     -o bootstrap.sh && bash bootstrap.sh <TOKEN>` and works as shown;
//   - an HTTP tunnel created right after the join carries traffic within
//     5 s, shows active, and the machine says "config applied (generation 2)";
//   - a tunnel created while the machine's agent is stopped waits (the
//     machine's config says pending, and why), and carries within about
//     10 s of the agent starting again (the machine's next ping of the
//     tunnel server), with nothing done by the operator;
//   - after a change of domain the machine follows by itself: its frpc
//     dials router.<new domain> and its tunnels carry again.
func TestDocumentedPath(t *testing.T) {
	parallel(t)
	start := time.Now()
	deb, _, _ := buildPackages(t)
	pebbleBin, _ := buildPebble(t)
	certs := pebbleTestCerts(t)
	t.Logf("packages built in %s", time.Since(start).Round(time.Millisecond))

	h := testbed.Boot(t, "vps")
	m := testbed.Boot(t, "machine")
	testbed.Join(t, h, docVPSIP+"/24", m, docMachineIP+"/24")
	jar, _ := cookiejar.New(nil)
	v := &vps{Host: h, t: t, client: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true}}}
	journal := func() string {
		out, _ := h.Exec("journalctl", "--no-pager", "-n", "60", "-u", "tunnelsvc.service", "-u", "revtunnel-server", "-u", "caddy", "-u", "pebble")
		mo, _ := m.Exec("journalctl", "--no-pager", "-n", "40", "-u", "revtunnel-client", "-u", "tunnel-agent")
		return "vps:\n" + out + "\nmachine:\n" + mo
	}

	// Each step starts from the state the previous one left: stop at the
	// first that fails.
	step := func(name string, f func(t *testing.T)) {
		parent := v.t
		ok := t.Run(name, func(t *testing.T) {
			v.t = t
			f(t)
		})
		v.t = parent
		if !ok {
			t.FailNow()
		}
	}

	// Requests on the VPS's loopback, as a process on the VPS makes them.
	loopback := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true}}
	get := func(c *http.Client, url string) (string, error) {
		resp, err := c.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return string(b), fmt.Errorf("%s: %s", url, resp.Status)
		}
		return string(b), nil
	}
	// carries reports whether the tunnel's port on the VPS's loopback
	// answers with the machine's file.
	carries := func(port int, want string) error {
		got, err := get(loopback, fmt.Sprintf("http://127.0.0.1:%d/hello.txt", port))
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("got %q", got)
		}
		return nil
	}
	// throughCaddy fetches https://<name>/hello.txt from caddy on the VPS
	// (as curl --resolve <name>:443:127.0.0.1 does), trusting Pebble's
	// issuing root only; set once Pebble runs.
	var caddyClient *http.Client
	throughCaddy := func(name, want string) error {
		got, err := get(caddyClient, "https://"+name+"/hello.txt")
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("got %q", got)
		}
		return nil
	}
	machine := func(id int64) map[string]any { return v.data("GET", fmt.Sprintf("/api/machines/%d", id), "", 200) }
	config := func(id int64) map[string]any {
		c, _ := machine(id)["config"].(map[string]any)
		return c
	}
	tunnel := func(id int64) map[string]any {
		return v.data("GET", fmt.Sprintf("/api/tunnels/%d", id), "", 200)
	}
	num := func(x any) int64 { f, _ := x.(float64); return int64(f) }
	installDone := func(t *testing.T, domain string, since time.Time) {
		t.Helper()
		testutil.Eventually(t, 90*time.Second, "install of "+domain+" done", func() error {
			st := v.data("GET", "/api/local/status", "", 200)
			units, _ := st["units"].(map[string]any)
			rs, _ := units["revtunnel-server"].(map[string]any)
			wp, _ := units["caddy"].(map[string]any)
			outcomes, _ := st["outcomes"].(map[string]any)
			inst, _ := outcomes["install"].(map[string]any)
			at, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(inst["at"]))
			if st["domain"] != domain || st["webproxy"] != "installed" || st["operation"] != nil || rs["active_state"] != "active" ||
				inst["ok"] != true || at.Before(since.Add(-time.Second)) {
				return fmt.Errorf("status %v (caddy %v)", st, wp)
			}
			return nil
		})
	}

	step("install the package", func(t *testing.T) {
		installDeb(t, h, deb)
		// Nothing set in the config file: setup is the API's alone.
		if env := h.Must("cat", "/etc/tunnelsvc/tunnelsvc.env"); regexp.MustCompile(`(?m)^\s*TUNNELSVC_(BASE_URL|SERVER_HOST)=`).MatchString(env) {
			t.Fatalf("tunnelsvc.env sets an address:\n%s", env)
		}
	})

	step("a private ACME CA", func(t *testing.T) {
		// Pebble with its own test certificate for 127.0.0.1; every
		// challenge is taken as valid, so no DNS is needed.
		h.CopyIn(pebbleBin, "/usr/local/bin/pebble", 0o755)
		h.CopyIn(filepath.Join(certs, "localhost", "cert.pem"), "/etc/pebble/cert.pem", 0o644)
		h.CopyIn(filepath.Join(certs, "localhost", "key.pem"), "/etc/pebble/key.pem", 0o600)
		h.CopyIn(filepath.Join(certs, "pebble.minica.pem"), docACMERoot, 0o644)
		cfg, _ := json.Marshal(map[string]any{"pebble": map[string]any{
			"listenAddress":                  "127.0.0.1:14000",
			"managementListenAddress":        "127.0.0.1:15000",
			"certificate":                    "/etc/pebble/cert.pem",
			"privateKey":                     "/etc/pebble/key.pem",
			"httpPort":                       80,
			"tlsPort":                        443,
			"ocspResponderURL":               "",
			"externalAccountBindingRequired": false,
			// No Retry-After: Debian's caddy 2.6 refuses Pebble's HTTP-date
			// form and then waits a minute (see testutil.StartPebble).
			"retryAfter": map[string]int{"authz": 0, "order": 0},
		}})
		h.WriteFile("/etc/pebble/pebble.json", cfg, 0o644)
		h.Must("systemd-run", "--unit=pebble", "-E", "PEBBLE_VA_ALWAYS_VALID=1", "-E", "PEBBLE_VA_NOSLEEP=1", "-E", "PEBBLE_WFE_NONCEREJECT=0",
			"/usr/local/bin/pebble", "-config", "/etc/pebble/pebble.json")
		d := testutil.Eventually(t, 30*time.Second, "pebble's directory answers", func() error {
			_, err := h.Exec("curl", "-fsS", "--max-time", "3", "--cacert", docACMERoot, "-o", "/dev/null", docPebbleDir)
			return err
		})
		t.Logf("pebble answered %s after its start", d.Round(time.Millisecond))
		// Pebble's issuing root, made at its start.
		root := h.Must("curl", "-fsS", "--max-time", "5", "--cacert", docACMERoot, docPebbleMgmt+"/roots/0")
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(root)) {
			t.Fatalf("pebble's /roots/0 is no PEM certificate: %q", root)
		}
		caddyClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return h.DialContext(ctx, network, "127.0.0.1:443")
			},
			TLSClientConfig:   &tls.Config{RootCAs: pool},
			DisableKeepAlives: true,
		}}
		// The machine trusts it the way an operator with a private CA
		// would: in the system store, which curl uses.
		t0 := time.Now()
		m.WriteFile("/usr/local/share/ca-certificates/pebble-root.crt", []byte(root), 0o644)
		m.MustWithin(3*time.Minute, "update-ca-certificates")
		t.Logf("update-ca-certificates on the machine: %s", time.Since(t0).Round(time.Millisecond))
	})

	step("first setup through the API", func(t *testing.T) {
		v.data("POST", "/api/auth/setup", fmt.Sprintf(`{"password":%q}`, password), 200)
		acme := v.data("PUT", "/api/local/acme", fmt.Sprintf(`{"acme_ca":%q,"acme_ca_root":%q}`, docPebbleDir, docACMERoot), 200)
		if acme["acme_ca"] != docPebbleDir || acme["acme_ca_root"] != docACMERoot {
			t.Fatalf("PUT /api/local/acme: %v", acme)
		}
		t0 := time.Now()
		// No server_host: machines reach router.<domain> (docs/install.md).
		v.data("POST", "/api/local/install", `{"domain":"`+docDomain+`"}`, 200)
		installDone(t, docDomain, t0)
		if st := v.data("GET", "/api/local/status", "", 200); st["server_host"] != "router."+docDomain {
			t.Fatalf("server host after an install without one: %v", st["server_host"])
		}
		if cf := h.Must("cat", "/etc/tunnelsvc/Caddyfile"); !strings.Contains(cf, "acme_ca "+docPebbleDir) || !strings.Contains(cf, "router."+docDomain+" {") {
			t.Fatalf("the Caddyfile:\n%s", cf)
		}
		t.Logf("installed in %s", time.Since(t0).Round(time.Millisecond))
	})

	var id int64
	var joined time.Time
	step("join a machine with the command the dashboard shows", func(t *testing.T) {
		// DNS as the operator set it up, seen from the machine; and, as on
		// a real machine, its own name resolves.
		m.Must("sh", "-c", "printf '%s\\n' '"+docVPSIP+" router."+docDomain+"' '127.0.1.1 machine' >>/etc/hosts")
		// The dashboard at https://router.<domain>, once caddy holds a
		// certificate from the ACME CA.
		d := testutil.Eventually(t, 90*time.Second, "https://router."+docDomain+" from the machine", func() error {
			out, err := m.Exec("curl", "-fsS", "--max-time", "5", "-o", "/dev/null", "https://router."+docDomain+"/healthz")
			if err != nil {
				return fmt.Errorf("%v\n%s", err, out)
			}
			return nil
		})
		t.Logf("https://router.%s answered the machine %s after the install", docDomain, d.Round(time.Millisecond))

		tok := v.data("POST", "/api/bootstrap/tokens", `{}`, 200)
		token, _ := tok["token"].(string)
		command, _ := tok["command"].(string)
		want := "curl -fsSL https://router." + docDomain + "/static/bootstrap.sh -o bootstrap.sh && bash bootstrap.sh " + token
		if command != want || token == "" {
			t.Fatalf("join command:\n%q\nwant\n%q", command, want)
		}
		if w, ok := tok["warning"]; ok {
			t.Fatalf("the join command comes with a warning: %v", w)
		}
		// As root in a terminal, answering the name prompt; the command is
		// run as given, in root's home.
		t0 := time.Now()
		out, err := m.ExecInput([]byte("web-1\n"), "script", "-qec", "cd /root && "+command, "/dev/null")
		t.Logf("the join command (%s):\n%s", time.Since(t0).Round(time.Millisecond), out)
		if err != nil || !strings.Contains(out, `"web-1" is joined`) {
			t.Fatalf("the join failed: %v\n%s", err, journal())
		}
		if !strings.Contains(out, "Machine name") {
			t.Fatalf("no name prompt on the terminal:\n%s", out)
		}
		testutil.Eventually(t, 30*time.Second, "the machine online", func() error {
			ms := v.machines()
			if len(ms) != 1 || ms[0]["status"] != "online" || ms[0]["name"] != "web-1" {
				return fmt.Errorf("machines: %v", ms)
			}
			id = num(ms[0]["id"])
			return nil
		})
		joined = time.Now()
		if conf := m.Must("cat", "/etc/revtunnel/client.toml"); !strings.Contains(conf, "serverAddr = 'router."+docDomain+"'") {
			t.Fatalf("client.toml does not dial router.%s:\n%s", docDomain, conf)
		}
		if got := strings.Fields(m.Must("systemctl", "is-active", "revtunnel-client", "tunnel-agent")); strings.Join(got, " ") != "active active" {
			t.Fatalf("is-active: %v\n%s", got, journal())
		}
	})
	if id == 0 {
		t.Fatal("no machine joined")
	}

	var webPort int
	step("an HTTP tunnel right after the join", func(t *testing.T) {
		m.WriteFile("/srv/web/hello.txt", []byte("hello from web-1\n"), 0o644)
		m.Must("systemd-run", "--unit=web", "-p", "WorkingDirectory=/srv/web",
			"/usr/bin/python3", "-m", "http.server", "8080", "--bind", "127.0.0.1")
		testutil.Eventually(t, 10*time.Second, "the web server on the machine", func() error {
			_, err := m.Exec("curl", "-fsS", "--max-time", "2", "-o", "/dev/null", "http://127.0.0.1:8080/hello.txt")
			return err
		})
		created := time.Now()
		tun := v.data("POST", "/api/tunnels", fmt.Sprintf(`{"machine_id":%d,"name":"web","kind":"http","local_port":8080,"subdomain":"web"}`, id), 201)
		tid := num(tun["id"])
		webPort = int(num(tun["remote_port"]))
		// Measured at the tunnel's port on the VPS's loopback, where caddy
		// forwards web.<domain>: the time is the config's way to the
		// machine and frps accepting the proxy, not caddy obtaining a
		// certificate (which is checked next, with its own deadline).
		testutil.Eventually(t, 30*time.Second, "the HTTP tunnel carries", func() error { return carries(webPort, "hello from web-1\n") })
		took := time.Since(created)
		t.Logf("join → HTTP tunnel carrying: %s after the create (%s after the machine came online)",
			took.Round(time.Millisecond), time.Since(joined).Round(time.Millisecond))
		if took > 5*time.Second {
			t.Errorf("the HTTP tunnel carried %s after its create, want within 5 s\n%s", took.Round(time.Millisecond), journal())
		}
		testutil.Eventually(t, 60*time.Second, "https://web."+docDomain+" through caddy", func() error {
			return throughCaddy("web."+docDomain, "hello from web-1\n")
		})
		t.Logf("https://web.%s through caddy with a certificate from the ACME CA: %s after the create",
			docDomain, time.Since(created).Round(time.Millisecond))
		testutil.Eventually(t, 10*time.Second, "the tunnel active", func() error {
			if tn := tunnel(tid); tn["status"] != "active" {
				return fmt.Errorf("tunnel: %v", tn)
			}
			return nil
		})
		// Generation 2 is the tunnel's; one more when the daemon learnt
		// frpc's version from the agent meanwhile (its config then asks
		// for frp's wire protocol v2).
		testutil.Eventually(t, 10*time.Second, "config applied (generation 2 or 3)", func() error {
			if c := config(id); (c["summary"] != "config applied (generation 2)" && c["summary"] != "config applied (generation 3)") || c["state"] != "applied" {
				return fmt.Errorf("config: %v", c)
			}
			return nil
		})
		if !strings.Contains(m.Must("cat", "/etc/revtunnel/client.toml"), fmt.Sprintf("remotePort = %d", webPort)) {
			t.Fatal("the tunnel is not in client.toml")
		}
	})

	var filesID int64
	var filesPort int
	step("a tunnel made while the agent is stopped", func(t *testing.T) {
		m.WriteFile("/srv/files/hello.txt", []byte("files of web-1\n"), 0o644)
		m.Must("systemd-run", "--unit=files", "-p", "WorkingDirectory=/srv/files",
			"/usr/bin/python3", "-m", "http.server", "8081", "--bind", "127.0.0.1")
		m.Must("systemctl", "stop", "tunnel-agent")
		tun := v.data("POST", "/api/tunnels", fmt.Sprintf(`{"machine_id":%d,"name":"files","kind":"tcp","local_port":8081}`, id), 201)
		filesID, filesPort = num(tun["id"]), int(num(tun["remote_port"]))
		time.Sleep(30 * time.Second)
		if err := carries(filesPort, "files of web-1\n"); err == nil {
			t.Fatal("the tunnel carries although the machine's agent is stopped")
		}
		c := config(id)
		last, _ := c["last_error"].(string)
		t.Logf("with the agent stopped: config %v; tunnel %v", c, tunnel(filesID))
		if c["state"] != "pending" || !strings.Contains(last, "agent does not answer") || !strings.HasPrefix(fmt.Sprint(c["summary"]), "pending since ") {
			t.Fatalf("the machine's config with its agent stopped: %v", c)
		}
		if tn := tunnel(filesID); tn["status"] == "active" || tn["status_reason"] == "" || tn["status_reason"] == nil {
			t.Fatalf("the undelivered tunnel: %v", tn)
		}
		// Still carrying: the tunnel the machine already has.
		if err := carries(webPort, "hello from web-1\n"); err != nil {
			t.Fatalf("the HTTP tunnel stopped carrying with the agent: %v", err)
		}

		started := time.Now()
		m.Must("systemctl", "start", "tunnel-agent")
		testutil.Eventually(t, 40*time.Second, "the TCP tunnel carries once the agent runs", func() error { return carries(filesPort, "files of web-1\n") })
		took := time.Since(started)
		t.Logf("agent start → TCP tunnel carrying: %s", took.Round(time.Millisecond))
		// The machine is connected: deliveries are tried at least every
		// 5 s (and at once at its pings, every 10 s); then the delivery
		// itself (frpc reload, frps accepting the proxy) takes a fraction
		// of a second.
		if took > 10*time.Second {
			t.Errorf("the TCP tunnel carried %s after the agent started, want within 10 s\n%s", took.Round(time.Millisecond), journal())
		}
		testutil.Eventually(t, 10*time.Second, "config applied again", func() error {
			if c := config(id); c["state"] != "applied" || num(c["applied_generation"]) != num(c["desired_generation"]) {
				return fmt.Errorf("config: %v", c)
			}
			if tn := tunnel(filesID); tn["status"] != "active" {
				return fmt.Errorf("tunnel: %v", tn)
			}
			return nil
		})
	})

	step("change of domain", func(t *testing.T) {
		// The operator's new DNS, seen from the machine.
		m.Must("sh", "-c", "echo '"+docVPSIP+" router."+docNewDomain+"' >>/etc/hosts")
		before := config(id)
		frpcBefore := strings.TrimSpace(m.Must("systemctl", "show", "-p", "InvocationID", "--value", "revtunnel-client"))
		t0 := time.Now()
		v.data("POST", "/api/local/install", `{"domain":"`+docNewDomain+`"}`, 200)
		installDone(t, docNewDomain, t0)
		installed := time.Now()
		t.Logf("installed again in %s", installed.Sub(t0).Round(time.Millisecond))
		// Nothing is done on the machine: its config follows, frpc
		// restarts and dials the new name, the tunnels carry again.
		testutil.Eventually(t, 60*time.Second, "the machine follows the new domain", func() error {
			conf := m.Must("cat", "/etc/revtunnel/client.toml")
			if !strings.Contains(conf, "serverAddr = 'router."+docNewDomain+"'") {
				return fmt.Errorf("client.toml does not name router.%s yet", docNewDomain)
			}
			if now := strings.TrimSpace(m.Must("systemctl", "show", "-p", "InvocationID", "--value", "revtunnel-client")); now == frpcBefore {
				return fmt.Errorf("frpc was not restarted (invocation %s)", now)
			}
			return carries(filesPort, "files of web-1\n")
		})
		took := time.Since(t0)
		t.Logf("domain change → TCP tunnel carrying again: %s after the install request (%s after the install was done)",
			took.Round(time.Millisecond), time.Since(installed).Round(time.Millisecond))
		testutil.Eventually(t, 30*time.Second, "the machine online, its config applied", func() error {
			mm := machine(id)
			c, _ := mm["config"].(map[string]any)
			if mm["status"] != "online" || c["state"] != "applied" || num(c["applied_generation"]) <= num(before["applied_generation"]) {
				return fmt.Errorf("machine %v; before the change: %v", mm, before)
			}
			return nil
		})
		testutil.Eventually(t, 10*time.Second, "the HTTP tunnel's port after the change", func() error { return carries(webPort, "hello from web-1\n") })
		testutil.Eventually(t, 60*time.Second, "https://web."+docNewDomain+" through caddy", func() error {
			return throughCaddy("web."+docNewDomain, "hello from web-1\n")
		})
		t.Logf("https://web.%s through caddy: %s after the change", docNewDomain, time.Since(t0).Round(time.Millisecond))
		c := config(id)
		t.Logf("config after the change: %v (before: %v)", c["summary"], before["summary"])
		// New machines are told the new address too.
		tok := v.data("POST", "/api/bootstrap/tokens", `{}`, 200)
		if cmd, _ := tok["command"].(string); !strings.HasPrefix(cmd, "curl -fsSL https://router."+docNewDomain+"/static/bootstrap.sh ") {
			t.Fatalf("join command after the change: %q", cmd)
		}
	})
	step("a machine that can only get out on port 443", func(t *testing.T) {
		m4 := testbed.Boot(t, "only443")
		t.Cleanup(func() {
			if t.Failed() {
				mo, _ := m4.Exec("journalctl", "--no-pager", "-n", "40", "-u", "revtunnel-client", "-u", "tunnel-agent")
				cf, _ := h.Exec("grep", "-A", "12", "pin the tunnel CA", "/etc/tunnelsvc/Caddyfile")
				ls, _ := h.Exec("ls", "-l", "/etc/tunnelsvc")
				t.Logf("behind 443:\n%s\nthe wss site:\n%s\n%s\n%s", mo, cf, ls, journal())
			}
		})
		testbed.JoinOn(t, h, "eth1", docVPSIP443+"/24", m4, docMachine443IP+"/24")
		m4.Must("sh", "-c", "printf '%s\\n' '"+docVPSIP443+" router."+docNewDomain+"' '127.0.1.1 only443' >>/etc/hosts")
		m4.WriteFile("/usr/local/share/ca-certificates/pebble-root.crt", []byte(h.Must("curl", "-fsS", "--max-time", "5", "--cacert", docACMERoot, docPebbleMgmt+"/roots/0")), 0o644)
		m4.MustWithin(3*time.Minute, "update-ca-certificates")
		// The machine's own firewall: nothing leaves but HTTPS (and its
		// own loopback).
		m4.Must("sh", "-c", `nft -f - <<'EOF'
table inet only443 {
	chain output {
		type filter hook output priority 0; policy drop;
		oifname "lo" accept
		ct state established,related accept
		tcp dport 443 accept
	}
}
EOF`)
		if out, err := m4.Exec("curl", "-sS", "--max-time", "3", "-o", "/dev/null", "telnet://router."+docNewDomain+":7000"); err == nil {
			t.Fatalf("the tunnel server's port is reachable from behind the firewall: %s", out)
		}
		// An sshd on its loopback, which the VPS's root reaches through the
		// machine's tunnel.
		h.Must("sh", "-c", "test -f /root/.ssh/id_ed25519 || ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519")
		m4.Must("mkdir", "-p", "/root/.ssh", "/etc/dropbear-test")
		m4.WriteFile("/root/.ssh/authorized_keys", []byte(h.Must("cat", "/root/.ssh/id_ed25519.pub")), 0o600)
		m4.Must("chmod", "700", "/root/.ssh")
		m4.Must("dropbearkey", "-t", "ed25519", "-f", "/etc/dropbear-test/host_ed25519")
		m4.Must("systemd-run", "--unit=sshd-test", "/usr/sbin/dropbear", "-F", "-E", "-s", "-p", "127.0.0.1:22", "-r", "/etc/dropbear-test/host_ed25519")

		tok := v.data("POST", "/api/bootstrap/tokens", `{}`, 200)
		command, _ := tok["command"].(string)
		t0 := time.Now()
		out, err := m4.ExecInput([]byte("behind-443\n"), "script", "-qec", "cd /root && "+command, "/dev/null")
		t.Logf("the join command behind the firewall (%s):\n%s", time.Since(t0).Round(time.Millisecond), out)
		if err != nil || !strings.Contains(out, `"behind-443" is joined`) {
			t.Fatalf("the join failed: %v\n%s", err, journal())
		}
		if !strings.Contains(out, "does not answer from here but router."+docNewDomain+":443 does") ||
			!strings.Contains(out, "reaches the tunnel server over port 443 (wss, through the web proxy)") {
			t.Fatalf("the join did not say it fell back to 443:\n%s", out)
		}
		var id4 int64
		testutil.Eventually(t, 30*time.Second, "the machine online over 443", func() error {
			for _, mm := range v.machines() {
				if mm["name"] != "behind-443" {
					continue
				}
				tr, _ := mm["transport"].(map[string]any)
				if mm["status"] != "online" || tr["configured"] != "wss" || tr["seen"] != "wss" || tr["addr"] != docMachine443IP {
					return fmt.Errorf("machine %v, transport %v", mm["status"], tr)
				}
				id4 = num(mm["id"])
				return nil
			}
			return fmt.Errorf("no machine behind-443 in %v", v.machines())
		})
		conf := m4.Must("cat", "/etc/revtunnel/client.toml")
		if !strings.Contains(conf, "protocol = 'wss'") || !strings.Contains(conf, "serverPort = 443") {
			t.Fatalf("client.toml:\n%s", conf)
		}
		mm := machine(id4)
		d := sshThroughTo(t, h, int(num(mm["tunnel_port"])), "only443", 30*time.Second, journal)
		t.Logf("ssh through the machine's tunnel over 443: %s", d.Round(time.Millisecond))

		m4.WriteFile("/srv/web/hello.txt", []byte("hello from behind 443\n"), 0o644)
		m4.Must("systemd-run", "--unit=web", "-p", "WorkingDirectory=/srv/web",
			"/usr/bin/python3", "-m", "http.server", "8080", "--bind", "127.0.0.1")
		created := time.Now()
		tun := v.data("POST", "/api/tunnels", fmt.Sprintf(`{"machine_id":%d,"name":"web443","kind":"http","local_port":8080,"subdomain":"web443"}`, id4), 201)
		testutil.Eventually(t, 30*time.Second, "the HTTP tunnel over 443 carries", func() error {
			return carries(int(num(tun["remote_port"])), "hello from behind 443\n")
		})
		t.Logf("HTTP tunnel over 443 carrying %s after its create", time.Since(created).Round(time.Millisecond))
		testutil.Eventually(t, 60*time.Second, "https://web443."+docNewDomain+" through caddy", func() error {
			return throughCaddy("web443."+docNewDomain, "hello from behind 443\n")
		})
		testutil.Eventually(t, 20*time.Second, "config applied over 443", func() error {
			if c := config(id4); c["state"] != "applied" {
				return fmt.Errorf("config: %v", c)
			}
			return nil
		})
	})
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}
