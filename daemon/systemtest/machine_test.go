package systemtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testbed"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

const (
	vpsIP     = "10.213.8.1"
	machineIP = "10.213.8.2"
	baseURL   = "http://" + vpsIP + ":7380"
)

// buildStatic builds the files machines download, with the Makefile's own
// rules (cached after the first build).
func buildStatic(t *testing.T) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	root := testbed.Root(t)
	cmd := exec.Command("make", "-s", "bin/static/agents/tunnel-agent-linux-amd64.sha256", "bin/static/revtunnel/revtunnel-client-linux-amd64.sha256")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make static files: %v\n%s", err, out)
	}
	return filepath.Join(root, "bin", "static")
}

// buildPebble is bin/pebble and bin/pebble-challtestsrv, built by the
// Makefile's rule when missing (one test at a time).
func buildPebble(t *testing.T) (pebble, challtestsrv string) {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	return testutil.PebbleBin(), testutil.ChallTestSrvBin()
}

// installServer puts on h what a VPS runs the daemon from, as the package
// lays it out: the daemon, frps with its unit, and the files machines
// download.
func installServer(t *testing.T, h *testbed.Host, bin, frps, static string) {
	t.Helper()
	root := testbed.Root(t)
	h.CopyIn(bin, "/usr/bin/tunnelsvc", 0o755)
	h.CopyIn(frps, "/usr/lib/tunnelsvc/frps", 0o755)
	h.CopyIn(filepath.Join(root, "systemd", "revtunnel-server.service"), "/etc/systemd/system/revtunnel-server.service", 0o644)
	for _, f := range []string{"agents/tunnel-agent-linux-amd64", "revtunnel/revtunnel-client-linux-amd64"} {
		h.CopyIn(filepath.Join(static, f), "/usr/lib/tunnelsvc/static/"+f, 0o644)
		h.CopyIn(filepath.Join(static, f+".sha256"), "/usr/lib/tunnelsvc/static/"+f+".sha256", 0o644)
	}
	h.CopyIn(filepath.Join(static, "VERSION"), "/usr/lib/tunnelsvc/static/VERSION", 0o644)
	h.Must("systemctl", "daemon-reload")
}

func (v *vps) data(method, path, body string, want int) map[string]any {
	v.t.Helper()
	a := v.do(method, path, body)
	if a.status != want {
		v.t.Fatalf("%s %s: %d %s, want %d", method, path, a.status, a.raw, want)
	}
	d, _ := a.body["data"].(map[string]any)
	return d
}

func (v *vps) machines() []map[string]any { return v.list("/api/machines") }

// list is GET path's data, a list of objects.
func (v *vps) list(path string) []map[string]any {
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

// TestMachineJoin: a real bootstrap.sh, run by a sudo user under a
// pseudo-terminal on a "machine" host with a real systemd, against the real
// daemon and real frps on a "vps" host joined by veth. No command is typed on
// the machine after the bootstrap: the new tunnel's config arrives through
// the agent. Then the uninstall removes everything, on both sides.
func TestMachineJoin(t *testing.T) {
	parallel(t)
	start := time.Now()
	bin := buildDaemon(t)
	static := buildStatic(t)
	frps, _ := testutil.FRP()
	t.Logf("built in %s", time.Since(start).Round(time.Millisecond))

	h := testbed.Boot(t, "vps")
	m := testbed.Boot(t, "machine")
	testbed.Join(t, h, vpsIP+"/24", m, machineIP+"/24")

	// The VPS: the daemon, frps as the packaged unit, the served files.
	installServer(t, h, bin, frps, static)
	// As tunnelsvc.service: other users' processes are invisible and only
	// CAP_NET_ADMIN is kept, so frps's uid can come only from systemd.
	h.Must("systemd-run", "--unit=tunnelsvc-test", "--collect", "-p", "ProtectProc=invisible", "-p", "CapabilityBoundingSet=CAP_NET_ADMIN",
		"/usr/bin/tunnelsvc", "serve",
		"--listen", "0.0.0.0:7380", "--data-dir", "/var/lib/tunnelsvc", "--base-url", baseURL,
		"--server-host", vpsIP, "--static-dir", "/usr/lib/tunnelsvc/static", "--bin-dir", "/usr/lib/tunnelsvc")
	jar, _ := cookiejar.New(nil)
	v := &vps{Host: h, t: t, client: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true}}}
	journal := func() string {
		out, _ := h.Exec("journalctl", "--no-pager", "-n", "40", "-u", "tunnelsvc-test", "-u", "revtunnel-server")
		mo, _ := m.Exec("journalctl", "--no-pager", "-n", "40", "-u", "revtunnel-client", "-u", "tunnel-agent")
		return "vps:\n" + out + "\nmachine:\n" + mo
	}
	testutil.Eventually(t, 20*time.Second, "the daemon answers", func() error {
		if _, err := h.Exec("curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:7380/healthz"); err != nil {
			return err
		}
		return nil
	})
	v.data("POST", "/api/auth/setup", `{"password":"`+password+`"}`, 200)
	v.data("POST", "/api/local/reconcile", "", 200)
	testutil.Eventually(t, 20*time.Second, "frps listens", func() error {
		if _, err := h.Exec("sh", "-c", "systemctl is-active revtunnel-server && ss -ltn | grep -q ':7000 '"); err != nil {
			return fmt.Errorf("%v\n%s", err, journal())
		}
		return nil
	})
	tok := v.data("POST", "/api/bootstrap/tokens", `{}`, 200)
	token, _ := tok["token"].(string)
	if !strings.Contains(fmt.Sprint(tok["command"]), baseURL+"/static/bootstrap.sh") {
		t.Fatalf("token command: %v", tok["command"])
	}

	// The machine: a sudo-capable user runs the one-liner in a terminal and
	// types the machine's name at the prompt.
	// As on a real machine, its own name resolves (sudo asks).
	m.Must("sh", "-c", "echo '127.0.1.1 machine' >>/etc/hosts")
	m.Must("useradd", "-m", "-s", "/bin/bash", "alice")
	m.WriteFile("/etc/sudoers.d/alice", []byte("alice ALL=(ALL) NOPASSWD:ALL\n"), 0o440)
	t0 := time.Now()
	oneLiner := fmt.Sprintf("curl -fsSL %s/static/bootstrap.sh | bash -s -- %s", baseURL, token)
	out, err := m.ExecInput([]byte("nas-1\n"), "runuser", "-u", "alice", "--", "script", "-qec", oneLiner, "/dev/null")
	t.Logf("bootstrap.sh (%s):\n%s", time.Since(t0).Round(time.Millisecond), out)
	if err != nil || !strings.Contains(out, `"nas-1" is joined`) {
		t.Fatalf("bootstrap failed: %v\n%s", err, journal())
	}
	if !strings.Contains(out, "Machine name") {
		t.Fatalf("no name prompt on the terminal:\n%s", out)
	}
	// A first join on a server laid out as the package lays it has nothing
	// to warn about (the bundle's VERSION among it).
	if strings.Contains(out, "warning:") || strings.Contains(out, "curl:") {
		t.Errorf("bootstrap.sh warned on a clean join:\n%s", out)
	}

	t.Run("services and files", func(t *testing.T) {
		if got := strings.Fields(m.Must("systemctl", "is-active", "revtunnel-client", "tunnel-agent")); strings.Join(got, " ") != "active active" {
			t.Fatalf("is-active: %v\n%s", got, journal())
		}
		key := strings.TrimSpace(m.Must("cat", "/etc/revtunnel/vps_key.pub"))
		if !strings.HasPrefix(key, "ssh-") || !strings.Contains(m.Must("cat", "/home/alice/.ssh/authorized_keys"), key) {
			t.Fatalf("the server's key %q is not in alice's authorized_keys", key)
		}
		// frpc reads its config as revtunnel; only root writes it.
		if st := strings.TrimSpace(m.Must("stat", "-c", "%a %U %G", "/etc/revtunnel/client.toml", "/etc/tunnel-agent/config.env")); st != "640 root revtunnel\n600 root root" {
			t.Fatalf("config modes: %q", st)
		}
		// client.toml is its own trustedCaFile: frps (revtunnel-server.service
		// on the copies its ExecStartPre made) proves a certificate from the
		// daemon's tunnel CA for the pinned name.
		if !strings.Contains(m.Must("cat", "/etc/revtunnel/client.toml"), "trustedCaFile = '/etc/revtunnel/client.toml'") {
			t.Fatal("client.toml does not pin the tunnel CA")
		}
		verify, _ := m.Exec("sh", "-c", "openssl s_client -connect "+vpsIP+":7000 -servername revtunnel-server.tunnelsvc.invalid "+
			"-verify_hostname revtunnel-server.tunnelsvc.invalid -CAfile /etc/revtunnel/client.toml -verify_return_error </dev/null 2>&1")
		if !strings.Contains(verify, "Verify return code: 0 (ok)") {
			t.Fatalf("frps's certificate does not verify against the CA in client.toml:\n%s", verify)
		}
		// The service's main process: a delivery may be running the
		// agent's root helper beside it (sudo tunnel-agent apply-config).
		pid := strings.TrimSpace(m.Must("systemctl", "show", "-p", "MainPID", "--value", "tunnel-agent"))
		if u := strings.TrimSpace(m.Must("ps", "-o", "user=", "-p", pid)); u != "tunnel" {
			t.Fatalf("tunnel-agent (pid %s) runs as %q, want tunnel", pid, u)
		}
	})

	t.Run("frps's traffic reaches /metrics", func(t *testing.T) { checkMetrics(t, h, v) })

	t.Run("frps and frpc run their Go code on one thread", func(t *testing.T) {
		// Environment=GOMAXPROCS=1 of revtunnel-server.service and of the
		// unit bootstrap.sh writes: the process's own environment says it.
		for _, p := range []struct {
			host *testbed.Host
			unit string
		}{{h, "revtunnel-server"}, {m, "revtunnel-client"}} {
			pid := strings.TrimSpace(p.host.Must("systemctl", "show", "-p", "MainPID", "--value", p.unit))
			env := strings.Split(p.host.Must("sh", "-c", "tr '\\0' '\\n' </proc/"+pid+"/environ"), "\n")
			if !slices.Contains(env, "GOMAXPROCS=1") {
				t.Errorf("%s (pid %s) runs without GOMAXPROCS=1: %q", p.unit, pid, env)
			}
		}
	})

	t.Run("frpc runs unprivileged and sandboxed", func(t *testing.T) {
		if u := strings.TrimSpace(m.Must("systemctl", "show", "-p", "User", "--value", "revtunnel-client")); u != "revtunnel" {
			t.Fatalf("systemctl show -p User revtunnel-client: %q, want revtunnel", u)
		}
		pid := strings.TrimSpace(m.Must("systemctl", "show", "-p", "MainPID", "--value", "revtunnel-client"))
		if u := strings.TrimSpace(m.Must("ps", "-o", "user=", "-p", pid)); u != "revtunnel" {
			t.Fatalf("frpc (pid %s) runs as %q, want revtunnel", pid, u)
		}
		if caps := m.Must("sh", "-c", "grep -E '^Cap(Eff|Prm|Bnd):' /proc/"+pid+"/status"); strings.Count(caps, "0000000000000000") != 3 {
			t.Fatalf("frpc has capabilities:\n%s", caps)
		}
		if _, err := m.Exec("runuser", "-u", "revtunnel", "--", "sh", "-c", "echo >>/etc/revtunnel/client.toml"); err == nil {
			t.Fatal("revtunnel can write its own config")
		}
		out := m.Must("systemd-analyze", "security", "revtunnel-client.service")
		last := out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]
		var level float64
		if _, err := fmt.Sscanf(last[strings.Index(last, ": ")+2:], "%g", &level); err != nil || level > 2.0 {
			t.Fatalf("systemd-analyze security revtunnel-client: %q, want exposure at most 2.0", strings.TrimSpace(last))
		}
		t.Logf("systemd-analyze security revtunnel-client.service: %s", strings.TrimSpace(last))
	})

	t.Run("the agent's user cannot widen frpc's config", func(t *testing.T) {
		// First the machine converges: once the daemon has read its
		// agent's status (as the machine's page does), it knows frpc's
		// version, and the config it delivers asks for frp's wire
		// protocol v2.
		var before string
		testutil.Eventually(t, 60*time.Second, "the machine's config applied, on wire protocol v2", func() error {
			ms := v.machines()
			if len(ms) != 1 {
				return fmt.Errorf("machines: %v", ms)
			}
			v.do("GET", fmt.Sprintf("/api/machines/%v/agent/status", ms[0]["id"]), "")
			c, _ := ms[0]["config"].(map[string]any)
			before = m.Must("cat", "/etc/revtunnel/client.toml")
			if c == nil || c["state"] != "applied" || !strings.Contains(before, "wireProtocol = 'v2'") {
				return fmt.Errorf("config %v; client.toml asks for wire protocol v2: %v", c, strings.Contains(before, "wireProtocol = 'v2'"))
			}
			return nil
		})
		for _, c := range []struct{ config, key string }{
			{strings.Replace(before, "[webServer]\n", "[webServer]\nassetsDir = \"/root\"\n", 1), "webServer.assetsDir"},
			{"log.to = \"/etc/x\"\n" + before, "log.to"},
			{"includes = [\"/etc/revtunnel/*.toml\"]\n" + before, "includes"},
		} {
			out, err := m.ExecInput([]byte(c.config), "runuser", "-u", "tunnel", "--", "sudo", "-n", "/usr/local/bin/tunnel-agent", "apply-config")
			if err == nil || !strings.Contains(out, "config refused: "+c.key) {
				t.Fatalf("apply-config took:\n%s\n%v\n%s", c.config, err, out)
			}
			t.Logf("refused: %s", strings.TrimSpace(out))
		}
		if after := m.Must("cat", "/etc/revtunnel/client.toml"); after != before {
			t.Fatalf("client.toml changed:\n%s", after)
		}
		if _, err := m.Exec("test", "-e", "/etc/x"); err == nil {
			t.Fatal("/etc/x exists")
		}
	})

	var id int64
	t.Run("online", func(t *testing.T) {
		testutil.Eventually(t, 30*time.Second, "machine online", func() error {
			ms := v.machines()
			if len(ms) != 1 || ms[0]["status"] != "online" || ms[0]["name"] != "nas-1" || ms[0]["username"] != "alice" {
				return fmt.Errorf("machines: %v", ms)
			}
			id = int64(ms[0]["id"].(float64))
			return nil
		})
		st := v.data("GET", fmt.Sprintf("/api/machines/%d/agent/status", id), "", 200)
		if st["active_state"] != "active" || !strings.Contains(fmt.Sprint(st["revtunnel_client_version"]), "0.") {
			t.Fatalf("agent status: %v", st)
		}
	})
	if id == 0 {
		t.Fatalf("no machine online\n%s", journal())
	}

	t.Run("new tunnel without touching the machine", func(t *testing.T) {
		m.WriteFile("/srv/site/hello.txt", []byte("hello from nas-1\n"), 0o644)
		m.Must("systemd-run", "--unit=site", "--property=WorkingDirectory=/srv/site",
			"/usr/bin/python3", "-m", "http.server", "8080", "--bind", "127.0.0.1")
		tun := v.data("POST", "/api/tunnels", fmt.Sprintf(`{"machine_id":%d,"name":"site","kind":"tcp","local_port":8080}`, id), 201)
		port := int(tun["remote_port"].(float64))
		d := testutil.Eventually(t, 40*time.Second, "traffic through the new tunnel", func() error {
			out, err := h.Exec("curl", "-fsS", "--max-time", "3", fmt.Sprintf("http://127.0.0.1:%d/hello.txt", port))
			if err != nil {
				return err
			}
			if out != "hello from nas-1\n" {
				return fmt.Errorf("got %q", out)
			}
			return nil
		})
		t.Logf("tunnel carried traffic %s after it was created", d.Round(time.Millisecond))
		if !strings.Contains(m.Must("cat", "/etc/revtunnel/client.toml"), fmt.Sprintf("remotePort = %d", port)) {
			t.Fatal("the pushed config is not in client.toml")
		}
		if st := strings.TrimSpace(m.Must("stat", "-c", "%a %U %G", "/etc/revtunnel/client.toml")); st != "640 root revtunnel" {
			t.Fatalf("the pushed client.toml is %q, want 640 root revtunnel", st)
		}
	})

	t.Run("restart through the agent", func(t *testing.T) {
		before := strings.TrimSpace(m.Must("systemctl", "show", "-p", "InvocationID", "--value", "revtunnel-client"))
		msg := v.data("POST", fmt.Sprintf("/api/machines/%d/agent/restart-tunnel", id), "", 200)
		if !strings.Contains(fmt.Sprint(msg["message"]), "restart started") {
			t.Fatalf("restart answer: %v", msg)
		}
		testutil.Eventually(t, 15*time.Second, "revtunnel-client restarted", func() error {
			after := strings.TrimSpace(m.Must("systemctl", "show", "-p", "InvocationID", "--value", "revtunnel-client"))
			if after == before || strings.TrimSpace(m.Must("systemctl", "show", "-p", "ActiveState", "--value", "revtunnel-client")) != "active" {
				return fmt.Errorf("invocation %s -> %s", before, after)
			}
			return nil
		})
		// And the agent is reachable again through the new tunnel.
		testutil.Eventually(t, 20*time.Second, "agent back", func() error {
			if a := v.do("GET", fmt.Sprintf("/api/machines/%d/agent/status", id), ""); a.status != 200 {
				return fmt.Errorf("%d %s", a.status, a.raw)
			}
			return nil
		})
	})

	t.Run("an agent that predates signed requests, through frps only", func(t *testing.T) { oldAgentThroughFrps(t, h, m, v, id, journal) })

	t.Run("re-run with a new token, unattended, as root", func(t *testing.T) {
		tok := v.data("POST", "/api/bootstrap/tokens", `{}`, 200)
		m.WriteFile("/root/bootstrap.sh", []byte(v.do("GET", "/static/bootstrap.sh", "").raw), 0o755)
		out, err := m.Exec("env", "TUNNEL_MACHINE_NAME=nas-2", "TUNNEL_ASSUME_YES=1", "setsid", "bash", "/root/bootstrap.sh", tok["token"].(string))
		if err != nil || !strings.Contains(out, "removed this machine's previous registration") {
			t.Fatalf("re-run: %v\n%s", err, out)
		}
		testutil.Eventually(t, 30*time.Second, "only the new registration, online", func() error {
			ms := v.machines()
			if len(ms) != 1 || ms[0]["name"] != "nas-2" || ms[0]["status"] != "online" || ms[0]["username"] != "root" {
				return fmt.Errorf("machines: %v", ms)
			}
			return nil
		})
		if n := strings.Count(m.Must("cat", "/home/alice/.ssh/authorized_keys"), "ssh-"); n != 1 {
			t.Fatalf("alice's authorized_keys has %d keys", n)
		}
		if got := strings.Fields(m.Must("systemctl", "is-active", "revtunnel-client", "tunnel-agent")); strings.Join(got, " ") != "active active" {
			t.Fatalf("is-active after re-run: %v", got)
		}
	})

	t.Run("uninstall", func(t *testing.T) {
		out := m.Must("runuser", "-u", "alice", "--", "sudo", "-n", "/usr/local/bin/tunnel-uninstall")
		t.Logf("tunnel-uninstall:\n%s", out)
		left, _ := m.Exec("sh", "-c", "ls -d /etc/revtunnel /etc/tunnel-agent /usr/local/bin/revtunnel-client /usr/local/bin/tunnel-agent "+
			"/usr/local/bin/tunnel-uninstall /etc/sudoers.d/revtunnel-client /etc/sudoers.d/tunnel-agent "+
			"/etc/systemd/system/revtunnel-client.service /etc/systemd/system/tunnel-agent.service 2>/dev/null; true")
		if strings.TrimSpace(left) != "" {
			t.Fatalf("left behind:\n%s", left)
		}
		for _, u := range []string{"tunnel", "revtunnel"} {
			if _, err := m.Exec("id", u); err == nil {
				t.Fatalf("user %s still exists", u)
			}
		}
		if ak := m.Must("cat", "/home/alice/.ssh/authorized_keys", "/root/.ssh/authorized_keys"); strings.Contains(ak, "ssh-") {
			t.Fatalf("the server's key is still in authorized_keys:\n%s", ak)
		}
		if st, _ := m.Exec("systemctl", "is-active", "revtunnel-client", "tunnel-agent"); strings.Contains(st, "active\n") && !strings.Contains(st, "inactive") {
			t.Fatalf("still active: %s", st)
		}
		if ms := v.machines(); len(ms) != 0 {
			t.Fatalf("machine not deleted: %v", ms)
		}
		// Twice is fine.
		m.WriteFile("/root/tunnel-uninstall", []byte(v.do("GET", "/static/tunnel-uninstall.sh", "").raw), 0o755)
		if out, err := m.Exec("/root/tunnel-uninstall"); err != nil {
			t.Fatalf("second run: %v\n%s", err, out)
		}
	})
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}
