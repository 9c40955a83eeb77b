package tunnelsvc

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestBootstrapRejoinUsage: --rejoin takes no token; a machine that never
// joined is told to join with a token.
func TestBootstrapRejoinUsage(t *testing.T) {
	out, err := exec.Command("bash", "scripts/bootstrap.sh", "--rejoin", "abc").CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "sudo bash bootstrap.sh --rejoin") {
		t.Fatalf("--rejoin with a token: %v\n%s", err, out)
	}
	if _, err := os.Stat("/etc/revtunnel/machine.env"); err == nil {
		t.Skip("this host is joined: /etc/revtunnel/machine.env exists")
	}
	cmd := exec.Command("setsid", "bash", "scripts/bootstrap.sh", "--rejoin")
	cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin"}
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "bootstrap: error: /etc/revtunnel/machine.env not found: this machine is not joined to a tunnel server (or was uninstalled), so there is nothing to rejoin; join it with a token instead") {
		t.Fatalf("not joined: %v\n%s", err, out)
	}
}

// rejoinServer is a tunnel server as far as bootstrap.sh --rejoin sees it.
type rejoinServer struct {
	mu          sync.Mutex
	token       string // the agent token the machine holds now
	rejoins     int
	selfDeletes int
}

func (s *rejoinServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	file := func(body string) {
		if strings.HasSuffix(r.URL.Path, ".sha256") {
			sum := sha256.Sum256([]byte(body))
			body = hex.EncodeToString(sum[:]) + "  f\n"
		}
		w.Write([]byte(body))
	}
	switch p := strings.TrimSuffix(r.URL.Path, ".sha256"); {
	case strings.HasPrefix(p, "/static/revtunnel/revtunnel-client-linux-"):
		file("#!/bin/sh\n# new tunnel client\nexit 0\n")
	case strings.HasPrefix(p, "/static/agents/tunnel-agent-linux-"):
		file("#!/bin/sh\n# new agent\nexit 0\n")
	case p == "/static/tunnel-uninstall.sh":
		file("#!/bin/sh\n# uninstall\n")
	case strings.HasPrefix(p, "/static/units/"):
		file("# unit " + p + "\n")
	case p == "/api/machines/rejoin" && r.Method == "POST":
		if r.Header.Get("Authorization") != "Bearer "+s.token {
			w.WriteHeader(401)
			w.Write([]byte(`{"error":"unknown agent token: no machine holds it"}`))
			return
		}
		s.rejoins++
		s.token = "tok" + strings.Repeat("x", s.rejoins)
		json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{
			"tunnel_port": 20001, "vps_ssh_public_key": "ssh-ed25519 AAAAvps root@vps",
			"revtunnel_client_config": "# config for " + s.token + "\n", "agent_token": s.token,
			"agent_local_port": 7390, "machine_id": 3, "name": "nas", "rejoined": true,
		}})
	case p == "/api/machines/self-delete":
		s.selfDeletes++
	default:
		http.NotFound(w, r)
	}
}

// TestBootstrapRejoin runs bootstrap.sh --rejoin against a fake server, with
// its paths moved under a temporary root and systemctl, sudo and the user
// tools stubbed: it rejoins with the machine's own token, never asks for a
// name or a confirmation, replaces the tunnel client, the agent, both units
// and the credential, does not delete the machine, and can run again.
func TestBootstrapRejoin(t *testing.T) {
	switch runtime.GOARCH {
	case "amd64", "arm64":
	default:
		t.Skip("the agent is built for amd64 and arm64")
	}
	srv := &rejoinServer{token: "oldtoken"}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	root := t.TempDir()
	dir := func(p string) string {
		d := filepath.Join(root, p)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	write := func(p, body string, mode os.FileMode) {
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	etc, bin, units, home, stubs := dir("etc/revtunnel"), dir("bin"), dir("systemd"), dir("home/pi"), dir("stubs")
	dir("run/systemd/system")
	dir("sudoers.d")
	dir("log")
	write(filepath.Join(etc, "machine.env"), "TUNNEL_SERVER_URL="+ts.URL+"\nTUNNEL_AGENT_TOKEN=oldtoken\nTUNNEL_USER=pi\nTUNNEL_AUTHORIZED_KEYS="+home+"/.ssh/authorized_keys\n", 0o600)
	write(filepath.Join(etc, "client.toml"), "# old config\n", 0o640)
	write(filepath.Join(bin, "revtunnel-client"), "#!/bin/sh\n# old tunnel client\nexit 0\n", 0o755)
	write(filepath.Join(bin, "tunnel-agent"), "#!/bin/sh\n# old agent\n", 0o755)
	for name, body := range map[string]string{
		"systemctl": `echo "$*" >>"` + root + `/systemctl.log"`,
		"sudo":      `exec "$@"`,
		"useradd":   `exit 0`,
		"visudo":    `exit 0`,
		"getent":    `echo "pi:x:1000:1000::` + home + `:/bin/bash"`,
		"runuser":   `shift 3; exec "$@"`,
		"id": `case "$*" in
-u) echo 0 ;;
-un) echo root ;;
*) exit 0 ;;
esac`,
		// install -o/-g name users this host may not have.
		"install": `args=(); while [ $# -gt 0 ]; do case $1 in -o|-g) shift 2 ;; *) args+=("$1"); shift ;; esac; done; exec /usr/bin/install "${args[@]}"`,
	} {
		write(filepath.Join(stubs, name), "#!/bin/bash\n"+body+"\n", 0o755)
	}
	script := read("scripts/bootstrap.sh")
	for old, new := range map[string]string{
		"{base_url}": ts.URL, "/etc/revtunnel": etc, "/usr/local/bin": bin, "/etc/tunnel-agent": dir("etc/tunnel-agent"),
		"/etc/systemd/system": units, "/etc/sudoers.d": filepath.Join(root, "sudoers.d"),
		"/run/systemd/system": filepath.Join(root, "run/systemd/system"), "/var/log": filepath.Join(root, "log"),
	} {
		script = strings.ReplaceAll(script, old, new)
	}
	path := filepath.Join(root, "bootstrap.sh")
	write(path, script, 0o644)

	run := func() string {
		t.Helper()
		cmd := exec.Command("setsid", "bash", path, "--rejoin")
		cmd.Env = []string{"PATH=" + stubs + ":/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + home}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("rejoin: %v\n%s", err, out)
		}
		return string(out)
	}
	out := run()
	for _, want := range []string{
		`bootstrap: rejoined as "nas" (machine 3): same name, ports and tunnels`,
		`bootstrap: done: "nas" rejoined ` + ts.URL + ` with the server's agent and tunnel client; it kept its id, ports and tunnels`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Machine name") || strings.Contains(out, "Replace it") || strings.Contains(out, "removed this machine's previous registration") {
		t.Errorf("the rejoin asked or deleted:\n%s", out)
	}
	if srv.rejoins != 1 || srv.selfDeletes != 0 {
		t.Fatalf("rejoins %d, self-deletes %d", srv.rejoins, srv.selfDeletes)
	}
	env := read(filepath.Join(etc, "machine.env"))
	if !strings.Contains(env, "TUNNEL_AGENT_TOKEN="+srv.token+"\n") || !strings.Contains(env, "TUNNEL_USER=pi\n") || strings.Count(env, "TUNNEL_AUTHORIZED_KEYS=") != 1 {
		t.Errorf("machine.env:\n%s", env)
	}
	if got := read(filepath.Join(etc, "client.toml")); got != "# config for "+srv.token+"\n" {
		t.Errorf("client.toml = %q", got)
	}
	if !strings.Contains(read(filepath.Join(bin, "revtunnel-client")), "new tunnel client") || !strings.Contains(read(filepath.Join(bin, "tunnel-agent")), "new agent") {
		t.Error("the tunnel client or the agent was not replaced")
	}
	if !strings.Contains(read(filepath.Join(root, "etc/tunnel-agent/config.env")), "TUNNEL_AGENT_TOKEN="+srv.token+"\n") {
		t.Error("the agent does not have the new token")
	}
	if !strings.Contains(read(filepath.Join(home, ".ssh/authorized_keys")), "ssh-ed25519 AAAAvps root@vps") {
		t.Error("the server's key is not authorized")
	}
	for _, u := range []string{"revtunnel-client.service", "tunnel-agent.service"} {
		if _, err := os.Stat(filepath.Join(units, u)); err != nil {
			t.Errorf("unit %s: %v", u, err)
		}
	}
	sys := read(filepath.Join(root, "systemctl.log"))
	for _, want := range []string{"restart revtunnel-client.service", "restart tunnel-agent.service"} {
		if !strings.Contains(sys, want) {
			t.Errorf("systemctl was not asked to %s:\n%s", want, sys)
		}
	}
	if !strings.Contains(read(filepath.Join(root, "log/tunnelsvc-rejoin.log")), `rejoined as "nas"`) {
		t.Error("the run is not in the rejoin log")
	}

	// Again: it uses the credential the first run saved.
	run()
	if srv.rejoins != 2 || srv.selfDeletes != 0 || !strings.Contains(read(filepath.Join(etc, "machine.env")), "TUNNEL_AGENT_TOKEN="+srv.token+"\n") {
		t.Fatalf("second run: rejoins %d, self-deletes %d", srv.rejoins, srv.selfDeletes)
	}

	// A token the server no longer knows: refused in words, nothing changed.
	srv.mu.Lock()
	srv.token = "other"
	srv.mu.Unlock()
	cmd := exec.Command("setsid", "bash", path, "--rejoin")
	cmd.Env = []string{"PATH=" + stubs + ":/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + home}
	bad, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(bad), "bootstrap: error: rejoin refused (HTTP 401): unknown agent token: no machine holds it") {
		t.Fatalf("refused rejoin: %v\n%s", err, bad)
	}
}
