package systemtest

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testbed"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// Bundle versions of the fleet test: machines join with A; the server then
// carries B; C's agent exits as soon as it starts.
const (
	versionA = "1.0.0+fleet.a"
	versionB = "1.1.0+fleet.b"
	versionC = "1.2.0+fleet.c"
)

// fleetVPS is the address machines reach the server at (eth0 of the VPS);
// machine i sits on 10.213.(20+i).0/24 and routes there through the VPS.
const (
	fleetVPS     = "10.213.21.1"
	fleetBaseURL = "http://" + fleetVPS + ":7380"
)

// staticTree writes what the server offers machines as bundle version v:
// the agent built with that version (or, for C, one that exits at start),
// frpc (the file at frpc), their .sha256 files and VERSION.
func staticTree(t *testing.T, frpc, v string, broken bool) string {
	t.Helper()
	dir := t.TempDir()
	agentPath := filepath.Join(dir, "agents", "tunnel-agent-linux-amd64")
	os.MkdirAll(filepath.Dir(agentPath), 0o755)
	os.MkdirAll(filepath.Join(dir, "revtunnel"), 0o755)
	if broken {
		os.WriteFile(agentPath, []byte("#!/bin/sh\necho 'tunnel-agent "+v+": broken on purpose' >&2\nexit 1\n"), 0o755)
	} else {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+v, "-o", agentPath, "./daemon/cmd/tunnel-agent")
		cmd.Dir = testbed.Root(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build the agent %s: %v\n%s", v, err, out)
		}
	}
	client, err := os.ReadFile(frpc)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "revtunnel", "revtunnel-client-linux-amd64"), client, 0o755)
	for _, f := range []string{"agents/tunnel-agent-linux-amd64", "revtunnel/revtunnel-client-linux-amd64"} {
		data, _ := os.ReadFile(filepath.Join(dir, f))
		sum := sha256.Sum256(data)
		os.WriteFile(filepath.Join(dir, f+".sha256"), []byte(hex.EncodeToString(sum[:])+"  "+filepath.Base(f)+"\n"), 0o644)
	}
	os.WriteFile(filepath.Join(dir, "VERSION"), []byte(v+"\n"), 0o644)
	return dir
}

// The frpc versions a machine reports: the previous bundle's, and the
// pinned one's (tools/frp-previous/go.mod and tools/frp/go.mod).
func previousFRPC(t *testing.T) string {
	return strings.TrimPrefix(testutil.PreviousFRPVersion(t), "v")
}

func pinnedFRPC(t *testing.T) string { return strings.TrimPrefix(testutil.FRPVersion(t), "v") }

// preFleetCommit is the last commit before agents could update themselves:
// its agent signs requests but has no update capability, like every agent
// installed before fleet updates.
const preFleetCommit = "b18f62f"

// preFleetAgent builds the agent of preFleetCommit (from the repository's
// history, with the module cache this build uses).
func preFleetAgent(t *testing.T) string {
	t.Helper()
	root := testbed.Root(t)
	src := t.TempDir()
	archive := exec.Command("sh", "-c", "git archive "+preFleetCommit+" go.mod go.sum daemon | tar -x -C "+src)
	archive.Dir = root
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s (the repository's history is needed): %v\n%s", preFleetCommit, err, out)
	}
	bin := filepath.Join(t.TempDir(), "tunnel-agent")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version=0.9.0+pre.fleet", "-o", bin, "./daemon/cmd/tunnel-agent")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the agent of %s: %v\n%s", preFleetCommit, err, out)
	}
	return bin
}

// serve puts a static tree where the daemon reads it (it decides at use
// time, so no restart).
func serveTree(h *testbed.Host, dir string) {
	for _, f := range []string{"agents/tunnel-agent-linux-amd64", "agents/tunnel-agent-linux-amd64.sha256",
		"revtunnel/revtunnel-client-linux-amd64", "revtunnel/revtunnel-client-linux-amd64.sha256", "VERSION"} {
		h.CopyIn(filepath.Join(dir, f), "/usr/lib/tunnelsvc/static/"+f, 0o644)
	}
}

type fleetMachine struct {
	*testbed.Host
	name string
	id   int64
	port int // SSH tunnel port on the VPS
}

// sums is what is installed on the machine: the binaries' and units' SHA-256.
func (m *fleetMachine) sums(t *testing.T) string {
	t.Helper()
	return m.Must("sha256sum", "/usr/local/bin/tunnel-agent", "/usr/local/bin/revtunnel-client",
		"/etc/systemd/system/tunnel-agent.service", "/etc/systemd/system/revtunnel-client.service")
}

// TestFleetUpdate: a VPS and three machines with real systemd. Machines
// join with bundle A; the server then carries B. A fleet update with the
// second machine offline updates the canary, stops at the second and leaves
// the third untouched; SSH through the canary's tunnel keeps working during
// its update. The second, back online, is updated alone. Bundle C, whose
// agent exits at start, is rolled back by the timer the previous agent
// armed. A bundle whose SHA-256 does not match changes nothing. A machine
// whose agent predates fleet updates rejoins with the one line its page
// shows and keeps its id, name, ports and tunnels.
func TestFleetUpdate(t *testing.T) {
	parallel(t)
	start := time.Now()
	bin := buildDaemon(t)
	static := buildStatic(t)
	frps, _ := testutil.FRP()
	// A carries the frpc the bundle had before the current pin; B and C
	// the pinned one, which frps on the VPS is built from.
	pinned := filepath.Join(static, "revtunnel", "revtunnel-client-linux-amd64")
	treeA := staticTree(t, testutil.PreviousFRPC(t), versionA, false)
	treeB := staticTree(t, pinned, versionB, false)
	treeC := staticTree(t, pinned, versionC, true)
	t.Logf("built in %s", time.Since(start).Round(time.Millisecond))

	h := testbed.Boot(t, "vps")
	ms := make([]*fleetMachine, 3)
	for i := range ms {
		ms[i] = &fleetMachine{Host: testbed.Boot(t, fmt.Sprintf("m%d", i+1)), name: fmt.Sprintf("m%d", i+1)}
		testbed.JoinOn(t, h, fmt.Sprintf("eth%d", i), fmt.Sprintf("10.213.%d.1/24", 21+i), ms[i].Host, fmt.Sprintf("10.213.%d.2/24", 21+i))
		if i > 0 {
			ms[i].Must("ip", "route", "add", "10.213.21.0/24", "via", fmt.Sprintf("10.213.%d.1", 21+i))
		}
	}
	root := testbed.Root(t)
	h.CopyIn(bin, "/usr/bin/tunnelsvc", 0o755)
	h.CopyIn(frps, "/usr/lib/tunnelsvc/frps", 0o755)
	h.CopyIn(filepath.Join(root, "systemd", "revtunnel-server.service"), "/etc/systemd/system/revtunnel-server.service", 0o644)
	serveTree(h, treeA)
	h.Must("systemctl", "daemon-reload")
	h.Must("systemd-run", "--unit=tunnelsvc-test", "--collect", "/usr/bin/tunnelsvc", "serve",
		"--listen", "0.0.0.0:7380", "--data-dir", "/var/lib/tunnelsvc", "--base-url", fleetBaseURL,
		"--server-host", fleetVPS, "--static-dir", "/usr/lib/tunnelsvc/static", "--bin-dir", "/usr/lib/tunnelsvc")
	jar, _ := cookiejar.New(nil)
	v := &vps{Host: h, t: t, client: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true}}}
	journal := func() string {
		out, _ := h.Exec("journalctl", "--no-pager", "-n", "60", "-u", "tunnelsvc-test", "-u", "revtunnel-server")
		s := "vps:\n" + out
		for _, m := range ms {
			mo, _ := m.Exec("journalctl", "--no-pager", "-n", "30", "-u", "revtunnel-client", "-u", "tunnel-agent", "-u", "tunnelsvc-rollback", "-u", "sshd-test")
			s += "\n" + m.name + ":\n" + mo
			// Whether the machine's own sshd answers, apart from the
			// tunnel, and the connections it holds.
			banner, err := m.Exec("timeout", "3", "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/22 && head -c 40 <&3")
			conns, _ := m.Exec("ss", "-tnp")
			s += fmt.Sprintf("%s: sshd on 127.0.0.1:22 says %q (%v)\n%s\n", m.name, banner, err, conns)
		}
		return s
	}
	testutil.Eventually(t, 20*time.Second, "the daemon answers", func() error {
		_, err := h.Exec("curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:7380/healthz")
		return err
	})
	v.data("POST", "/api/auth/setup", `{"password":"`+password+`"}`, 200)
	v.data("POST", "/api/local/reconcile", "", 200)
	testutil.Eventually(t, 20*time.Second, "frps listens", func() error {
		_, err := h.Exec("sh", "-c", "systemctl is-active revtunnel-server && ss -ltn | grep -q ':7000 '")
		return err
	})
	h.Must("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", "/root/.ssh/id_ed25519")
	pub := h.Must("cat", "/root/.ssh/id_ed25519.pub")

	// Every machine joins with A, unattended, as root, and runs a real sshd.
	for _, m := range ms {
		tok := v.data("POST", "/api/bootstrap/tokens", `{}`, 200)
		m.Must("sh", "-c", "echo '127.0.1.1 "+m.name+"' >>/etc/hosts")
		m.WriteFile("/root/bootstrap.sh", []byte(v.do("GET", "/static/bootstrap.sh", "").raw), 0o755)
		out, err := m.Exec("env", "TUNNEL_MACHINE_NAME="+m.name, "TUNNEL_ASSUME_YES=1", "setsid", "bash", "/root/bootstrap.sh", tok["token"].(string))
		if err != nil || !strings.Contains(out, `"`+m.name+`" is joined`) {
			t.Fatalf("bootstrap of %s: %v\n%s\n%s", m.name, err, out, journal())
		}
		m.WriteFile("/root/.ssh/authorized_keys", []byte(pub), 0o600)
		m.Must("chmod", "700", "/root/.ssh")
		m.Must("mkdir", "-p", "/etc/dropbear-test")
		m.Must("dropbearkey", "-t", "ed25519", "-f", "/etc/dropbear-test/host_ed25519")
		m.Must("systemd-run", "--unit=sshd-test", "/usr/sbin/dropbear", "-F", "-E", "-s", "-p", "127.0.0.1:22", "-r", "/etc/dropbear-test/host_ed25519")
	}
	byName := func() map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, x := range v.machines() {
			out[x["name"].(string)] = x
		}
		return out
	}
	testutil.Eventually(t, 40*time.Second, "three machines online with bundle A", func() error {
		all := byName()
		for _, m := range ms {
			x := all[m.name]
			if x == nil || x["status"] != "online" || x["agent_version"] != versionA || x["bundle_version"] != versionA {
				return fmt.Errorf("%s: %v", m.name, x)
			}
			m.id = int64(x["id"].(float64))
			m.port = int(x["tunnel_port"].(float64))
		}
		return nil
	})
	// An HTTP tunnel to a web server on m1 (the daemon delivers it to m1's
	// agent), asked through frps's port for it from the VPS.
	ms[0].Must("mkdir", "-p", "/srv/web")
	ms[0].WriteFile("/srv/web/whoami", []byte("m1's web server\n"), 0o644)
	ms[0].Must("systemd-run", "--unit=web", "python3", "-m", "http.server", "8080", "--bind", "127.0.0.1", "--directory", "/srv/web")
	web := v.data("POST", "/api/tunnels", fmt.Sprintf(`{"machine_id":%d,"name":"web","kind":"http","subdomain":"web","local_port":8080}`, ms[0].id), 201)
	webURL := fmt.Sprintf("http://127.0.0.1:%v/whoami", web["remote_port"])
	testutil.Eventually(t, 30*time.Second, "m1's web server through its HTTP tunnel", func() error {
		out, err := h.Exec("curl", "-fsS", "--max-time", "3", webURL)
		if err != nil || strings.TrimSpace(out) != "m1's web server" {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	tunnels := v.do("GET", "/api/tunnels", "").raw
	for _, m := range ms {
		sshThroughNamed(t, h, m.port, m.name, 30*time.Second, journal)
	}

	// The server now carries B: every machine is outdated.
	serveTree(h, treeB)
	testutil.Eventually(t, 10*time.Second, "outdated", func() error {
		for name, x := range byName() {
			u, _ := x["update"].(map[string]any)
			if u["state"] != "outdated" {
				return fmt.Errorf("%s: update %v", name, u)
			}
		}
		return nil
	})

	t.Run("a fleet update stops at the first failure and leaves the rest untouched", func(t *testing.T) {
		// m2 is offline: its agent does not answer.
		ms[1].Must("systemctl", "stop", "tunnel-agent")
		untouched := ms[2].sums(t)
		// SSH through the canary's tunnel, twice a second, while it updates.
		watch := watchSSH(t, h, ms[0].port, ms[0].name)
		watchWeb := watchHTTP(h, webURL, "m1's web server")
		t0 := time.Now()
		ans := v.do("POST", "/api/machines/update", fmt.Sprintf(`{"machine_ids":[%d,%d,%d],"batch":1}`, ms[0].id, ms[1].id, ms[2].id))
		if ans.status != 202 {
			t.Fatalf("fleet update: %d %s", ans.status, ans.raw)
		}
		var summary map[string]any
		testutil.Eventually(t, 150*time.Second, "the fleet update ends", func() error {
			a := v.do("GET", "/api/machines/update", "")
			summary, _ = a.body["data"].(map[string]any)
			if summary == nil || summary["running"] != false || summary["finished_at"] == nil {
				return fmt.Errorf("%d %s", a.status, a.raw)
			}
			return nil
		})
		gaps, webGaps := watch(), watchWeb()
		t.Logf("fleet update ended after %s: %v", time.Since(t0).Round(time.Millisecond), summary)
		failed, _ := summary["failed"].(map[string]any)
		if fmt.Sprint(summary["updated"]) != fmt.Sprintf("[%d]", ms[0].id) || failed == nil || failed["name"] != "m2" || failed["error"] == "" ||
			fmt.Sprint(summary["untouched"]) != fmt.Sprintf("[%d]", ms[2].id) {
			t.Fatalf("summary: %v\n%s", summary, journal())
		}
		all := byName()
		if x := all["m1"]; x["agent_version"] != versionB || x["bundle_version"] != versionB || x["update"].(map[string]any)["state"] != "current" {
			t.Fatalf("m1 after the update: %v", x)
		}
		if u := all["m2"]["update"].(map[string]any); u["state"] != "failed" || u["error"] == "" {
			t.Fatalf("m2: %v", u)
		}
		if after := ms[2].sums(t); after != untouched || all["m3"]["agent_version"] != versionA {
			t.Fatalf("m3 was touched: %v\n%s", all["m3"], after)
		}
		// SSH through m1: at most one cut, frpc's restart.
		oneRestart(t, "ssh through m1", gaps)
		// m3, not updated, still runs the previous frpc, and its tunnel
		// works against the new frps.
		if x := all["m3"]; x["client_version"] != previousFRPC(t) || x["client_version"] == all["m1"]["client_version"] {
			t.Fatalf("m3 runs frpc %v, m1 %v; want m3 on %s", x["client_version"], all["m1"]["client_version"], previousFRPC(t))
		}
		sshThroughNamed(t, h, ms[2].port, ms[2].name, 10*time.Second, journal)
		// m1's new frpc reported, its config asks for frp's wire protocol
		// v2, and m1 applied it: SSH through m1 on it.
		testutil.Eventually(t, 60*time.Second, "m1 on the pinned frpc applies a wire protocol v2 config", func() error {
			x := byName()["m1"]
			c, _ := x["config"].(map[string]any)
			if x["client_version"] != pinnedFRPC(t) || c == nil || c["desired_generation"] != c["applied_generation"] {
				return fmt.Errorf("m1: client %v, config %v", x["client_version"], c)
			}
			if conf := ms[0].Must("cat", "/etc/revtunnel/client.toml"); !strings.Contains(conf, "wireProtocol = 'v2'") {
				return fmt.Errorf("m1's client.toml asks for no wire protocol")
			}
			return nil
		})
		sshThroughNamed(t, h, ms[0].port, ms[0].name, 10*time.Second, journal)
		if out, err := h.Exec("curl", "-fsS", "--max-time", "3", webURL); err != nil || strings.TrimSpace(out) != "m1's web server" {
			t.Fatalf("HTTP through m1 on wire protocol v2: %v %s", err, out)
		}
		// The same for HTTP through m1's tunnel.
		oneRestart(t, "HTTP through m1", webGaps)
		if after := v.do("GET", "/api/tunnels", "").raw; after != tunnels {
			t.Fatalf("tunnels changed:\n%s\n%s", tunnels, after)
		}
		// On the machine: B installed, the previous bundle kept, the timer gone.
		if got := strings.TrimSpace(ms[0].Must("cat", "/usr/local/lib/tunnelsvc/bundle-version")); got != versionB {
			t.Fatalf("m1 bundle-version %q", got)
		}
		ms[0].Must("test", "-x", "/usr/local/lib/tunnelsvc/previous/tunnel-agent")
		if _, err := ms[0].Exec("systemctl", "is-active", "tunnelsvc-rollback.timer"); err == nil {
			t.Fatal("the rollback timer is still armed after the confirmation")
		}
	})

	t.Run("one machine, back online, reports B within 30 s", func(t *testing.T) {
		ms[1].Must("systemctl", "start", "tunnel-agent")
		testutil.Eventually(t, 30*time.Second, "m2's agent answers", func() error {
			if a := v.do("GET", fmt.Sprintf("/api/machines/%d/agent/status", ms[1].id), ""); a.status != 200 {
				return fmt.Errorf("%d %s", a.status, a.raw)
			}
			return nil
		})
		watch := watchSSH(t, h, ms[1].port, ms[1].name)
		v.data("POST", fmt.Sprintf("/api/machines/%d/update", ms[1].id), "", 202)
		d := testutil.Eventually(t, 30*time.Second, "m2 reports B", func() error {
			x := byName()["m2"]
			if x["agent_version"] != versionB || x["update"].(map[string]any)["state"] != "current" {
				return fmt.Errorf("%v", x)
			}
			return nil
		})
		gaps := watch()
		t.Logf("m2 reported %s %s after the update started; ssh gaps %v", versionB, d.Round(time.Millisecond), gaps)
		oneRestart(t, "ssh through m2", gaps)
		sshThroughNamed(t, h, ms[1].port, ms[1].name, 10*time.Second, journal)
	})

	t.Run("an agent that exits at start is rolled back by the armed timer", func(t *testing.T) {
		serveTree(h, treeC)
		before := ms[0].sums(t)
		t0 := time.Now()
		v.data("POST", fmt.Sprintf("/api/machines/%d/update", ms[0].id), "", 202)
		var u map[string]any
		testutil.Eventually(t, 90*time.Second, "m1 rolled back", func() error {
			u, _ = byName()["m1"]["update"].(map[string]any)
			if u["state"] != "rolled_back" {
				return fmt.Errorf("%v", u)
			}
			return nil
		})
		t.Logf("rolled back %s after the update started: %v", time.Since(t0).Round(time.Millisecond), u)
		if !strings.Contains(fmt.Sprint(u["error"]), "did not check in within 60 s") {
			t.Fatalf("reason: %v", u)
		}
		testutil.Eventually(t, 30*time.Second, "m1 online on B", func() error {
			x := byName()["m1"]
			if x["status"] != "online" || x["agent_version"] != versionB {
				return fmt.Errorf("%v", x)
			}
			return nil
		})
		if after := ms[0].sums(t); after != before {
			t.Fatalf("m1's files after the rollback differ from B's:\n%s\n%s", before, after)
		}
		sshThroughNamed(t, h, ms[0].port, ms[0].name, 20*time.Second, journal)
	})

	t.Run("a bundle whose SHA-256 does not match changes nothing", func(t *testing.T) {
		serveTree(h, treeB)
		m := ms[2]
		before := m.sums(t)
		env := m.Must("cat", "/etc/tunnel-agent/config.env")
		var token, port string
		sc := bufio.NewScanner(strings.NewReader(env))
		for sc.Scan() {
			k, val, _ := strings.Cut(sc.Text(), "=")
			switch k {
			case "TUNNEL_AGENT_TOKEN":
				token = val
			case "TUNNEL_AGENT_PORT":
				port = val
			}
		}
		sum := strings.Fields(v.do("GET", "/static/bundles/machine-linux-amd64.tar.gz.sha256", "").raw)[0]
		size := len(v.do("GET", "/static/bundles/machine-linux-amd64.tar.gz", "").raw)
		wrong := strings.Repeat("0", 64)
		if sum == wrong {
			t.Fatal("the bundle's SHA-256 is zeros")
		}
		body := fmt.Sprintf(`{"version":%q,"url":%q,"sha256":%q,"size":%d}`, versionB, fleetBaseURL+"/static/bundles/machine-linux-amd64.tar.gz", wrong, size)
		if status, raw := signedAgentCall(t, m.Host, port, token, "POST", "/update", body); status != 202 {
			t.Fatalf("POST /update: %d %s", status, raw)
		}
		testutil.Eventually(t, 30*time.Second, "the agent refuses the bundle", func() error {
			_, raw := signedAgentCall(t, m.Host, port, token, "GET", "/status", "")
			if !strings.Contains(raw, `"state":"failed"`) || !strings.Contains(raw, "SHA-256 mismatch") || !strings.Contains(raw, "nothing was changed") {
				return fmt.Errorf("%s", raw)
			}
			return nil
		})
		if after := m.sums(t); after != before {
			t.Fatalf("files changed:\n%s\n%s", before, after)
		}
		if _, err := m.Exec("test", "-e", "/usr/local/lib/tunnelsvc/previous"); err == nil {
			t.Fatal("a refused bundle saved a previous bundle")
		}
		if x := byName()["m3"]; x["agent_version"] != versionA {
			t.Fatalf("m3: %v", x)
		}
	})
	t.Run("a machine whose agent predates fleet updates rejoins with one line and keeps its registration", func(t *testing.T) {
		m := ms[2]
		// m3 as installed before fleet updates: the agent of that time.
		m.CopyIn(preFleetAgent(t), "/usr/local/bin/tunnel-agent.pre-fleet", 0o755)
		m.Must("mv", "-f", "/usr/local/bin/tunnel-agent.pre-fleet", "/usr/local/bin/tunnel-agent")
		m.Must("systemctl", "restart", "tunnel-agent")
		before := byName()["m3"]
		var u map[string]any
		testutil.Eventually(t, 30*time.Second, "m3 unsupported", func() error {
			// Reading its status records what it reports.
			if a := v.do("GET", fmt.Sprintf("/api/machines/%d/agent/status", m.id), ""); a.status != 200 {
				return fmt.Errorf("agent status %d %s", a.status, a.raw)
			}
			u, _ = byName()["m3"]["update"].(map[string]any)
			if u["state"] != "unsupported" || u["rejoin_command"] == "" {
				return fmt.Errorf("%v", u)
			}
			return nil
		})
		line := u["rejoin_command"].(string)
		if want := "curl -fsSL " + fleetBaseURL + "/static/bootstrap.sh | sudo bash -s -- --rejoin"; line != want {
			t.Fatalf("rejoin line %q, want %q", line, want)
		}
		if a := v.do("POST", fmt.Sprintf("/api/machines/%d/update", m.id), ""); a.status != 409 || !strings.Contains(a.raw, line) {
			t.Fatalf("update of an unsupported machine: %d %s", a.status, a.raw)
		}
		out, err := m.Exec("sh", "-c", line)
		t.Logf("the rejoin line on m3:\n%s", out)
		if err != nil || !strings.Contains(out, "rejoined") {
			t.Fatalf("rejoin: %v\n%s\n%s", err, out, journal())
		}
		testutil.Eventually(t, 40*time.Second, "m3 online on B, same registration", func() error {
			if a := v.do("GET", fmt.Sprintf("/api/machines/%d/agent/status", m.id), ""); a.status != 200 {
				return fmt.Errorf("agent status %d %s", a.status, a.raw)
			}
			x := byName()["m3"]
			if x["status"] != "online" || x["agent_version"] != versionB || x["update"].(map[string]any)["state"] != "current" {
				return fmt.Errorf("%v", x)
			}
			for _, k := range []string{"id", "name", "tunnel_port", "agent_port", "username"} {
				if fmt.Sprint(x[k]) != fmt.Sprint(before[k]) {
					return fmt.Errorf("%s changed: %v → %v", k, before[k], x[k])
				}
			}
			return nil
		})
		if after := v.do("GET", "/api/tunnels", "").raw; after != tunnels {
			t.Fatalf("tunnels changed:\n%s\n%s", tunnels, after)
		}
		sshThroughNamed(t, h, m.port, m.name, 20*time.Second, journal)
	})
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}

// sshThroughNamed waits until ssh through the tunnel port reaches the
// machine that calls itself name.
func sshThroughNamed(t *testing.T, h *testbed.Host, port int, name string, d time.Duration, journal func() string) {
	t.Helper()
	var last string
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		out, err := sshOnce(t, h, port)
		if err == nil && out == name {
			return
		}
		last = fmt.Sprintf("%v: %s", err, out)
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("no ssh to %s through port %d within %s (last: %s)\n%s", name, port, d, last, journal())
}

func sshOnce(t *testing.T, h *testbed.Host, port int) (string, error) {
	out, err := h.Exec("timeout", "6", "ssh", "-i", "/root/.ssh/id_ed25519", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=3", "-o", "LogLevel=ERROR",
		"-p", fmt.Sprint(port), "root@127.0.0.1", "hostname")
	return strings.TrimSpace(out), err
}

// watchSSH tries ssh through port twice a second until the returned stop
// is called, and returns the gaps: how long it failed each time.
func watchSSH(t *testing.T, h *testbed.Host, port int, name string) (stop func() []time.Duration) {
	return watch(func() bool {
		out, err := sshOnce(t, h, port)
		return err == nil && out == name
	})
}

// watchHTTP is watchSSH for an HTTP tunnel: GET url from the VPS must
// answer body.
func watchHTTP(h *testbed.Host, url, body string) (stop func() []time.Duration) {
	return watch(func() bool {
		out, err := h.Exec("curl", "-fsS", "--max-time", "3", url)
		return err == nil && strings.TrimSpace(out) == body
	})
}

// oneRestart fails unless what was cut at most once, for a restart of
// frpc rather than a wait on a timeout. The bound is not a stopwatch: a
// restart logs in again at once and takes a few seconds (more on a busy
// machine, and a gap is measured only to the nearest probe), while
// anything that waits instead (frps's heartbeat timeout of 90 s, frpc's
// login backoff, the agent's rollback timer) takes far longer than 20 s.
func oneRestart(t *testing.T, what string, gaps []time.Duration) {
	t.Helper()
	t.Logf("%s during the update: %d cut(s) %v", what, len(gaps), gaps)
	if len(gaps) > 1 || (len(gaps) == 1 && gaps[0] > 20*time.Second) {
		t.Fatalf("%s was cut during the update: %v", what, gaps)
	}
}

// watch runs probe twice a second until the returned stop is called, and
// returns the gaps: how long it failed each time.
func watch(probe func() bool) (stop func() []time.Duration) {
	done := make(chan struct{})
	var mu sync.Mutex
	var gaps []time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var down time.Time
		for {
			select {
			case <-done:
				if !down.IsZero() {
					mu.Lock()
					gaps = append(gaps, time.Since(down))
					mu.Unlock()
				}
				return
			default:
			}
			// A gap runs from the start of the first probe that failed to
			// the start of the first that worked again: both ends at the
			// same point of a probe, so that how long one probe takes (an
			// SSH handshake, longer on a busy machine) does not count.
			t0 := time.Now()
			ok := probe()
			switch {
			case !ok && down.IsZero():
				down = t0
			case ok && !down.IsZero():
				mu.Lock()
				gaps = append(gaps, t0.Sub(down))
				mu.Unlock()
				down = time.Time{}
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	return func() []time.Duration {
		close(done)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return gaps
	}
}

// signedAgentCall sends one request to the machine's agent on its
// loopback, signed with its token as the daemon signs them (GET /challenge,
// then the request on the same connection).
func signedAgentCall(t *testing.T, m *testbed.Host, port, token, method, path, body string) (int, string) {
	t.Helper()
	tr := &http.Transport{DialContext: m.DialContext, MaxConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	base := "http://127.0.0.1:" + port
	nonce := agent.NewNonce()
	req, _ := http.NewRequest("GET", base+"/challenge", nil)
	req.Header.Set(agent.HeaderNonce, nonce)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET /challenge: %v", err)
	}
	var ch struct {
		Challenge string `json:"challenge"`
	}
	json.NewDecoder(resp.Body).Decode(&ch)
	resp.Body.Close()
	nonce = agent.NewNonce()
	req, _ = http.NewRequest(method, base+path, strings.NewReader(body))
	req.Header.Set(agent.HeaderNonce, nonce)
	req.Header.Set(agent.HeaderChallenge, ch.Challenge)
	req.Header.Set(agent.HeaderSignature, agent.RequestSignature(token, method, path, []byte(body), ch.Challenge, nonce))
	resp, err = c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}
