package systemtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testbed"
)

const (
	dashboard = "http://127.0.0.1:7380"
	password  = "correct horse battery staple"
)

var daemonBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// buildDaemon builds tunnelsvc once for all the tests, into a temporary
// directory TestMain removes. As make builds it: -trimpath (without it, a
// new clone compiles every package again although Go's build cache holds
// them) and no symbol table or DWARF (half the link).
func buildDaemon(t *testing.T) string {
	t.Helper()
	b := &daemonBuild
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "tunnelsvc-daemon-"); b.err != nil {
			return
		}
		b.bin = filepath.Join(b.dir, "tunnelsvc")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", b.bin, "./daemon/cmd/tunnelsvc")
		cmd.Dir = testbed.Root(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build tunnelsvc: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// vps is a testbed host with tunnelsvc's units and binary installed the way
// the package installs them, the socket enabled and started.
type vps struct {
	*testbed.Host
	t      *testing.T
	client *http.Client
}

func installVPS(t *testing.T) *vps {
	t.Helper()
	bin := buildDaemon(t)
	h := testbed.Boot(t, "vps")
	root := testbed.Root(t)
	h.CopyIn(bin, "/usr/bin/tunnelsvc", 0o755)
	for _, u := range []string{"tunnelsvc.socket", "tunnelsvc-plugin.socket", "tunnelsvc-gate.socket", "tunnelsvc.service", "revtunnel-server.service"} {
		h.CopyIn(filepath.Join(root, "systemd", u), "/etc/systemd/system/"+u, 0o644)
	}
	// A short watchdog, so a daemon that stopped pinging would be killed
	// (and counted in NRestarts) within this test's time.
	h.WriteFile("/etc/systemd/system/tunnelsvc.service.d/10-test.conf",
		[]byte("[Service]\nWatchdogSec=2s\n"), 0o644)
	// frps is built by a later issue; a stand-in keeps the real unit file
	// under test: it runs until stopped, as frps does.
	h.WriteFile("/usr/lib/tunnelsvc/frps", []byte("#!/bin/sh\nexec sleep infinity\n"), 0o755)
	h.WriteFile("/etc/revtunnel/server.toml", []byte("bindPort = 7000\n"), 0o600)
	// The unit copies the certificate and key beside it (the stand-in reads neither).
	h.WriteFile("/etc/revtunnel/server.crt", []byte("stand-in\n"), 0o644)
	h.WriteFile("/etc/revtunnel/server.key", []byte("stand-in\n"), 0o600)
	h.Must("systemctl", "daemon-reload")
	h.Must("systemctl", "enable", "--now", "tunnelsvc.socket", "tunnelsvc-plugin.socket", "tunnelsvc-gate.socket")
	jar, _ := cookiejar.New(nil)
	return &vps{Host: h, t: t, client: &http.Client{
		Jar:       jar,
		Timeout:   20 * time.Second,
		Transport: &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true},
	}}
}

// show returns systemd's properties of a unit.
// becomesActive waits until tunnelsvc.service is active, after the
// request that started it was answered: the daemon serves its inherited
// sockets as soon as it can and tells systemd it is ready a moment later,
// so right after the answer it may still be "activating".
func (v *vps) becomesActive(t *testing.T, after string) {
	t.Helper()
	st := ""
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if st = v.show("tunnelsvc.service", "ActiveState")["ActiveState"]; st == "active" {
			return
		}
	}
	t.Fatalf("tunnelsvc.service is %s 20 s after %s", st, after)
}

func (v *vps) show(unit string, props ...string) map[string]string {
	v.t.Helper()
	out := v.Must("systemctl", "show", "-p", strings.Join(props, ","), unit)
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, val, _ := strings.Cut(line, "=")
		m[k] = val
	}
	return m
}

// waitFor polls cond every 100 ms for at most d.
func (v *vps) waitFor(what string, d time.Duration, cond func() bool) {
	v.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			out, _ := v.Exec("journalctl", "--no-pager", "-n", "30", "-u", "tunnelsvc.service")
			v.t.Fatalf("%s: not within %s\njournal:\n%s", what, d, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type answer struct {
	status int
	body   map[string]any
	raw    string
}

func (v *vps) do(method, path, body string) answer {
	v.t.Helper()
	req, err := http.NewRequest(method, dashboard+path, strings.NewReader(body))
	if err != nil {
		v.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := v.client.Do(req)
	if err != nil {
		v.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, raw: string(raw)}
	json.Unmarshal(raw, &a.body)
	return a
}

func (a answer) unit(t *testing.T) map[string]any {
	t.Helper()
	data, _ := a.body["data"].(map[string]any)
	u, _ := data["unit"].(map[string]any)
	if u == nil {
		t.Fatalf("no unit in answer: %d %s", a.status, a.raw)
	}
	return u
}

// TestSystemd is one testbed boot for every step, in order: each step
// starts from the state the previous one left.
func TestSystemd(t *testing.T) {
	parallel(t)
	start := time.Now()
	v := installVPS(t)
	t.Logf("installed in %s", time.Since(start).Round(time.Millisecond))

	t.Run("socket activation", func(t *testing.T) {
		if st := v.show("tunnelsvc.service", "ActiveState")["ActiveState"]; st != "inactive" {
			t.Fatalf("service is %s before any connection, want inactive", st)
		}
		if st := v.show("tunnelsvc.socket", "ActiveState", "SubState"); st["SubState"] != "listening" {
			t.Fatalf("socket: %v", st)
		}
		if a := v.do("GET", "/healthz", ""); a.status != 200 {
			t.Fatalf("GET /healthz: %d %s", a.status, a.raw)
		}
	})

	t.Run("ready", func(t *testing.T) {
		// The daemon serves, then tells systemd it is ready; systemd may
		// take that in after /healthz was answered.
		v.becomesActive(t, "the first request")
		st := v.show("tunnelsvc.service", "StatusText", "ActiveState", "SubState", "Type")
		if st["ActiveState"] != "active" || st["SubState"] != "running" || st["StatusText"] != "serving" || st["Type"] != "notify" {
			t.Fatalf("after READY: %v", st)
		}
		// The state directory exists with the database, and only root reads it.
		if out := v.Must("stat", "-c", "%a %U", "/var/lib/tunnelsvc"); strings.TrimSpace(out) != "700 root" {
			t.Fatalf("/var/lib/tunnelsvc: %s", out)
		}
		v.Must("test", "-s", "/var/lib/tunnelsvc/tunnelsvc.db")
	})

	t.Run("watchdog pinged", func(t *testing.T) {
		before := v.show("tunnelsvc.service", "InvocationID", "WatchdogUSec", "NRestarts")
		if before["WatchdogUSec"] != "2s" {
			t.Fatalf("WatchdogUSec = %q, want the test's 2s", before["WatchdogUSec"])
		}
		// Three watchdog periods: a daemon that did not ping would be killed.
		time.Sleep(6 * time.Second)
		after := v.show("tunnelsvc.service", "InvocationID", "ActiveState", "NRestarts")
		if after["InvocationID"] != before["InvocationID"] || after["NRestarts"] != "0" || after["ActiveState"] != "active" {
			t.Fatalf("watchdog: before %v, after %v", before, after)
		}
	})

	t.Run("stop then socket activates again", func(t *testing.T) {
		first := v.show("tunnelsvc.service", "InvocationID")["InvocationID"]
		v.Must("systemctl", "stop", "tunnelsvc.service")
		st := v.show("tunnelsvc.service", "ActiveState", "Result", "ExecMainStatus")
		if st["ActiveState"] != "inactive" || st["Result"] != "success" || st["ExecMainStatus"] != "0" {
			t.Fatalf("after stop: %v", st)
		}
		if out, _ := v.Exec("journalctl", "--no-pager", "-u", "tunnelsvc.service", "-g", "stopped"); !strings.Contains(out, "msg=stopped") {
			t.Fatalf("no clean shutdown in the journal:\n%s", out)
		}
		if a := v.do("GET", "/healthz", ""); a.status != 200 {
			t.Fatalf("GET /healthz after stop: %d %s", a.status, a.raw)
		}
		again := v.show("tunnelsvc.service", "InvocationID", "ActiveState")
		if again["ActiveState"] != "active" || again["InvocationID"] == first {
			t.Fatalf("not activated again: %v (first invocation %s)", again, first)
		}
	})

	t.Run("no start limit closes the port", func(t *testing.T) {
		// systemd's default start limit is 5 starts in 10 s; every start
		// here is a connection to a stopped daemon.
		for i := 0; i < 8; i++ {
			v.Must("systemctl", "stop", "tunnelsvc.service")
			if a := v.do("GET", "/healthz", ""); a.status != 200 {
				t.Fatalf("activation %d: GET /healthz: %d %s", i+1, a.status, a.raw)
			}
		}
		for _, u := range []string{"tunnelsvc.socket", "tunnelsvc-plugin.socket", "tunnelsvc-gate.socket"} {
			if st := v.show(u, "ActiveState", "Result"); st["ActiveState"] != "active" || st["Result"] != "success" {
				t.Fatalf("%s after 8 activations: %v", u, st)
			}
		}
		// Starts counted so far do not count against the next test's kill.
		v.Must("systemctl", "reset-failed", "tunnelsvc.service")
	})

	t.Run("frps plugin call starts the daemon", func(t *testing.T) {
		v.Must("systemctl", "stop", "tunnelsvc.service")
		// What frps sends when a machine logs in; no dashboard request.
		out := v.Must("curl", "-sS", "--max-time", "20", "-H", "Content-Type: application/json", "-d",
			`{"version":"0.1.0","op":"Login","content":{"user":"m1","metas":{"token":"nope"}}}`,
			"http://127.0.0.1:7381/frp/plugin?op=Login")
		if !strings.Contains(out, `"reject":true`) {
			t.Fatalf("plugin answer: %s", out)
		}
		v.becomesActive(t, "a plugin call")
		if out, _ := v.Exec("journalctl", "--no-pager", "-u", "tunnelsvc.service", "-g", "serving frps plugin calls"); strings.Count(out, "addr=127.0.0.1:7381") == 0 {
			t.Fatalf("no plugin listener in the journal:\n%s", out)
		}
	})

	t.Run("web proxy's gate check starts the daemon", func(t *testing.T) {
		v.Must("systemctl", "stop", "tunnelsvc.service")
		// What Caddy asks before a request to an HTTP tunnel, here for a
		// host that is no tunnel; no dashboard request.
		code := v.Must("curl", "-sS", "--max-time", "20", "-o", "/dev/null", "-w", "%{http_code}",
			"-H", "X-Forwarded-Host: nothing.example.test", "-H", "X-Forwarded-Method: GET", "-H", "X-Forwarded-Uri: /",
			"http://127.0.0.1:7382/check")
		if code == "000" || code == "" {
			t.Fatalf("the gate did not answer: %q", code)
		}
		v.becomesActive(t, "a gate check")
	})

	t.Run("kill -9 is restarted", func(t *testing.T) {
		st := v.show("tunnelsvc.service", "MainPID", "NRestarts")
		if st["MainPID"] == "0" || st["NRestarts"] != "0" {
			t.Fatalf("before kill: %v", st)
		}
		v.Must("kill", "-9", st["MainPID"])
		v.waitFor("restart after kill -9", 15*time.Second, func() bool {
			now := v.show("tunnelsvc.service", "MainPID", "NRestarts", "ActiveState")
			return now["NRestarts"] == "1" && now["ActiveState"] == "active" && now["MainPID"] != st["MainPID"] && now["MainPID"] != "0"
		})
		if a := v.do("GET", "/healthz", ""); a.status != 200 {
			t.Fatalf("GET /healthz after restart: %d %s", a.status, a.raw)
		}
	})

	t.Run("units through the API", func(t *testing.T) {
		if a := v.do("GET", "/api/units", ""); a.status != 401 {
			t.Fatalf("without a session: %d %s", a.status, a.raw)
		}
		if a := v.do("POST", "/api/auth/setup", fmt.Sprintf(`{"password":%q}`, password)); a.status != 200 {
			t.Fatalf("setup: %d %s", a.status, a.raw)
		}
		a := v.do("GET", "/api/units", "")
		if a.status != 200 || !strings.Contains(a.raw, `"name":"revtunnel-server.service"`) || !strings.Contains(a.raw, `"name":"caddy.service"`) {
			t.Fatalf("GET /api/units: %d %s", a.status, a.raw)
		}

		restart := func() string {
			t.Helper()
			a := v.do("POST", "/api/units/revtunnel-server/restart", "")
			if a.status != 200 {
				t.Fatalf("restart: %d %s", a.status, a.raw)
			}
			u := a.unit(t)
			id, _ := u["invocation_id"].(string)
			sd := v.show("revtunnel-server.service", "ActiveState", "InvocationID")
			if u["active_state"] != "active" || id == "" || id != sd["InvocationID"] || sd["ActiveState"] != "active" {
				t.Fatalf("after restart: API %v, systemd %v", u, sd)
			}
			return id
		}
		first := restart()
		if second := restart(); second == first {
			t.Fatalf("restart kept invocation %s", first)
		}

		// Off the allow-list: refused, and the unit is untouched.
		dbusBefore := v.show("dbus.service", "InvocationID")["InvocationID"]
		for _, name := range []string{"dbus", "systemd-journald.service", "tunnelsvc"} {
			a := v.do("POST", "/api/units/"+name+"/restart", "")
			if a.status != 400 || !strings.Contains(a.raw, "is not managed by tunnelsvc") {
				t.Fatalf("restart %s: %d %s", name, a.status, a.raw)
			}
		}
		if now := v.show("dbus.service", "InvocationID")["InvocationID"]; now != dbusBefore {
			t.Fatal("dbus.service was restarted")
		}

		a = v.do("POST", "/api/units/revtunnel-server/stop", "")
		if u := a.unit(t); a.status != 200 || u["active_state"] != "inactive" {
			t.Fatalf("stop: %d %s", a.status, a.raw)
		}
	})

	t.Run("ban tool status through the unit's sandbox", func(t *testing.T) {
		// Set up as the dashboard does; the status then comes from
		// fail2ban's socket, read by the daemon under its unit's
		// ProtectSystem=strict and RestrictAddressFamilies.
		if a := v.do("POST", "/api/local/setup-banner", ""); a.status != 200 {
			t.Fatalf("setup-banner: %d %s", a.status, a.raw)
		}
		var last string
		deadline := time.Now().Add(90 * time.Second)
		for {
			a := v.do("GET", "/api/security/banner", "")
			var body struct {
				Data struct {
					Installed bool `json:"installed"`
					Running   bool `json:"running"`
					Jails     []struct {
						Name string `json:"name"`
					} `json:"jails"`
				} `json:"data"`
			}
			if err := json.Unmarshal([]byte(a.raw), &body); a.status == 200 && err == nil && body.Data.Installed && body.Data.Running {
				names := []string{}
				for _, j := range body.Data.Jails {
					names = append(names, j.Name)
				}
				if slices.Contains(names, "tunnelsvc-auth") && slices.Contains(names, "sshd") {
					break
				}
			}
			last = fmt.Sprintf("%d %s", a.status, a.raw)
			if time.Now().After(deadline) {
				out, _ := v.Exec("journalctl", "--no-pager", "-n", "30", "-u", "tunnelsvc.service", "-u", "fail2ban.service")
				st := v.do("GET", "/api/local/status", "")
				t.Fatalf("the ban tool's status after its set-up: %s\nlocal status: %s\n%s", last, st.raw, out)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})

	t.Run("bus gone: private socket", func(t *testing.T) {
		// The daemon's bus connection closes with the bus daemon; it must
		// reconnect, to systemd's private socket this time.
		v.Must("systemctl", "stop", "dbus.socket", "dbus.service")
		a := v.do("POST", "/api/units/revtunnel-server.service/start", "")
		if a.status != 200 || a.unit(t)["active_state"] != "active" {
			t.Fatalf("start without the bus: %d %s", a.status, a.raw)
		}
		if out, _ := v.Exec("journalctl", "--no-pager", "-u", "tunnelsvc.service", "-g", "reconnecting"); !strings.Contains(out, "systemd connection closed; reconnecting") {
			t.Fatalf("the daemon did not reconnect:\n%s", out)
		}
	})

	t.Logf("system test took %s", time.Since(start).Round(time.Millisecond))
}

func TestMain(m *testing.M) {
	// Inside the machine host, this binary can be the agent as installed
	// before signed requests (see the machine test).
	if port := os.Getenv(oldAgentEnv); port != "" {
		serveOldAgent(port)
		return
	}
	// The build and the testbed need the go tool and root; say so plainly.
	if _, err := exec.LookPath("go"); err != nil {
		fmt.Fprintln(os.Stderr, "systemtest: the go tool is needed to build the daemon")
		os.Exit(1)
	}
	if err := initOrder(); err != nil {
		fmt.Fprintln(os.Stderr, "systemtest:", err)
		os.Exit(2)
	}
	code := m.Run()
	cleanupBuilt()
	if daemonBuild.dir != "" {
		os.RemoveAll(daemonBuild.dir)
	}
	os.Exit(code)
}
