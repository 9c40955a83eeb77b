package systemtest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testbed"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

const (
	pkgVPSIP     = "10.213.9.1"
	pkgMachineIP = "10.213.9.2"
	// What the operator's own caddy serves before tunnelsvc arrives.
	operatorSite = "operator site"
	// The frps version the upgrade's package carries, so the test can tell
	// which binary a running frps is.
	upgradedFRPS = "0.71.0-upgraded"
	// releaseCommit is the earlier release TestPackage upgrades from, built
	// by its own Makefile (scripts/release-package.sh): the last one
	// delivered. Not older: a daemon before 3df6f2a drops a request that
	// arrives during its own stop, which no later package can mend.
	releaseCommit = "726bd2ab91904bd76972728c9086c8af33bf505b"
)

// nfpmBin is the pinned nfpm (scripts/install-deps.sh installs it).
func nfpmBin(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(strings.TrimSpace(string(out)), "bin", "nfpm")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("nfpm is missing (scripts/install-deps.sh installs it): %v", err)
	}
	return bin
}

// The system tests run side by side. buildMu keeps the Makefile's rules
// (which write into bin/) to one test at a time, and the packages are built
// once for every test that installs them, into builtDir (removed after the
// tests, in TestMain).
var (
	buildMu  sync.Mutex
	pkgOnce  sync.Once
	builtDir string
	// upgradeVersion is the upgrade package's: this tree's (pkg-version.sh).
	upgradeVersion string
	built          struct {
		first, upgrade, rpm string
		err                 error
	}
)

// releasePackage is the .deb of releaseCommit, built once (and kept in
// the user's cache by commit, by scripts/release-package.sh).
func releasePackage(t *testing.T) string {
	t.Helper()
	releaseOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tunnelsvc-release-")
		if err != nil {
			release.err = err
			return
		}
		release.dir = dir
		deb := filepath.Join(dir, "release.deb")
		cmd := exec.Command("bash", "scripts/release-package.sh", releaseCommit, deb)
		cmd.Dir = testbed.Root(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			release.err = fmt.Errorf("the release's package: %v\n%s", err, out)
			return
		}
		release.deb = deb
	})
	if release.err != nil {
		t.Fatal(release.err)
	}
	return release.deb
}

var (
	releaseOnce sync.Once
	release     struct {
		dir, deb string
		err      error
	}
)

func cleanupBuilt() {
	if release.dir != "" {
		os.RemoveAll(release.dir)
	}
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
}

// installDeb installs the .deb at deb on h as an operator does on a VPS:
// apt-get, offline, with no policy-rc.d (a container image's forbids
// starting services; a VPS has none). It gives apt-get's output.
func installDeb(t *testing.T, h *testbed.Host, deb string) string {
	t.Helper()
	h.Must("rm", "-f", "/usr/sbin/policy-rc.d")
	h.CopyIn(deb, "/root/tunnelsvc.deb", 0o644)
	out, err := h.Exec("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "/root/tunnelsvc.deb")
	if err != nil {
		t.Fatalf("apt-get install: %v\n%s", err, out)
	}
	return out
}

// buildPackages builds two .debs (and the first one's .rpm) from this
// tree with the Makefile's rules and nfpm.yaml, once: the first carries the
// previous frp (an edge not upgraded yet, for the tests that install this
// tree's daemon), and the upgrade, at this tree's version, a frps that
// says it is the upgrade's. TestPackage upgrades to it from a real earlier
// release (releasePackage).
func buildPackages(t *testing.T) (first, upgrade, rpm string) {
	t.Helper()
	nfpm := nfpmBin(t)
	root := testbed.Root(t)
	pkgOnce.Do(func() {
		built.first, built.upgrade, built.rpm, built.err = makePackages(root, nfpm)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.first, built.upgrade, built.rpm
}

func makePackages(root, nfpm string) (first, upgrade, rpm string, err error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	mk := exec.Command("make", "-s", "daemon", "frp", "static", "bin/copyright")
	mk.Dir = root
	if out, err := mk.CombinedOutput(); err != nil {
		return "", "", "", fmt.Errorf("make: %v\n%s", err, out)
	}
	if builtDir, err = os.MkdirTemp("", "tunnelsvc-packages-"); err != nil {
		return "", "", "", err
	}
	dist := filepath.Join(builtDir, "dist")
	os.MkdirAll(dist, 0o755)
	// The first package is the previous release's frp (its frps, and its
	// frpc in the machine bundle); the upgrade brings the pinned one.
	previousFRPS, previousFRPC, err := previousFRP(root)
	if err != nil {
		return "", "", "", err
	}
	stage := func(name, version, frps, frpc string, packagers ...string) error {
		dir := filepath.Join(builtDir, name)
		os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
		// Copies, not symlinks: nfpm would package a symlink as one.
		cp := func(src, dst string) error {
			if out, err := exec.Command("cp", "-r", src, dst).CombinedOutput(); err != nil {
				return fmt.Errorf("cp %s: %v\n%s", src, err, out)
			}
			return nil
		}
		for _, f := range []string{"nfpm.yaml", "packaging", "systemd"} {
			if err := cp(filepath.Join(root, f), filepath.Join(dir, f)); err != nil {
				return err
			}
		}
		for _, f := range []string{"tunnelsvc", "static", "copyright"} {
			if err := cp(filepath.Join(root, "bin", f), filepath.Join(dir, "bin", f)); err != nil {
				return err
			}
		}
		if err := cp(frps, filepath.Join(dir, "bin", "frps")); err != nil {
			return err
		}
		if frpc != "" {
			client := filepath.Join(dir, "bin", "static", "revtunnel", "revtunnel-client-linux-amd64")
			if err := cp(frpc, client); err != nil {
				return err
			}
			if out, err := exec.Command("sh", "-c", "cd "+filepath.Dir(client)+" && sha256sum revtunnel-client-linux-amd64 > revtunnel-client-linux-amd64.sha256").CombinedOutput(); err != nil {
				return fmt.Errorf("sha256sum: %v\n%s", err, out)
			}
		}
		for _, p := range packagers {
			cmd := exec.Command(nfpm, "package", "-f", "nfpm.yaml", "-p", p, "-t", filepath.Join(dist, name+"."+p))
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "VERSION="+version, "GOARCH=amd64")
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("nfpm %s %s: %v\n%s", name, p, err, out)
			}
		}
		return nil
	}
	newFRPS := filepath.Join(builtDir, "frps")
	b := exec.Command("go", "build", "-tags", "noweb", "-trimpath", "-ldflags", "-s -w -X github.com/fatedier/frp/pkg/util/version.version="+upgradedFRPS,
		"-o", newFRPS, "github.com/fatedier/frp/cmd/frps")
	b.Dir = filepath.Join(root, "tools", "frp")
	b.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := b.CombinedOutput(); err != nil {
		return "", "", "", fmt.Errorf("build the upgrade's frps: %v\n%s", err, out)
	}
	if err := stage("first", "0.1.0+git9.aaaaaaaaaaaa", previousFRPS, previousFRPC, "deb", "rpm"); err != nil {
		return "", "", "", err
	}
	// The upgrade is this tree's package at its own version, which must
	// order after the release's (dpkg compares them).
	pv := exec.Command(filepath.Join(root, "scripts", "pkg-version.sh"))
	pv.Dir = root
	version, err := pv.Output()
	if err != nil {
		return "", "", "", fmt.Errorf("scripts/pkg-version.sh: %v", err)
	}
	upgradeVersion = strings.TrimSpace(string(version))
	if err := stage("upgrade", upgradeVersion, newFRPS, "", "deb"); err != nil {
		return "", "", "", err
	}
	return filepath.Join(dist, "first.deb"), filepath.Join(dist, "upgrade.deb"), filepath.Join(dist, "first.rpm"), nil
}

// previousFRP builds the previous release's frps and frpc
// (tools/frp-previous).
func previousFRP(root string) (frps, frpc string, err error) {
	mk := exec.Command("make", "-s", "bin/frps-previous", "bin/frpc-previous")
	mk.Dir = root
	if out, err := mk.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("make: %v\n%s", err, out)
	}
	return filepath.Join(root, "bin", "frps-previous"), filepath.Join(root, "bin", "frpc-previous"), nil
}

// TestPackage installs an earlier release's .deb (releaseCommit, built by
// its own Makefile) on a testbed VPS beside a running caddy that serves the
// operator's own site, joins a machine, reboots the VPS without a request
// to the dashboard, upgrades to this tree's package, removes and purges.
func TestPackage(t *testing.T) {
	parallel(t)
	start := time.Now()
	_, debB, rpmA := buildPackages(t)
	debA := releasePackage(t)
	t.Logf("packages built in %s", time.Since(start).Round(time.Millisecond))

	t.Run("rpm metadata", func(t *testing.T) { checkRPM(t, rpmA) })

	// Each step starts from the state the previous one left: stop at the
	// first that fails. The helpers report to the running step.
	var v *vps
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

	h := testbed.Boot(t, "vps")
	m := testbed.Boot(t, "machine")
	testbed.Join(t, h, pkgVPSIP+"/24", m, pkgMachineIP+"/24")
	jar, _ := cookiejar.New(nil)
	v = &vps{Host: h, t: t, client: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true}}}
	journal := func() string {
		out, _ := h.Exec("journalctl", "--no-pager", "-n", "40", "-u", "tunnelsvc.service", "-u", "revtunnel-server", "-u", "caddy", "-u", "tunnelsvc-firewall")
		mo, _ := m.Exec("journalctl", "--no-pager", "-n", "20", "-u", "revtunnel-client")
		return "vps:\n" + out + "\nmachine:\n" + mo
	}
	var tunnelPort int // the machine's ssh tunnel port on the VPS
	ssh := func(t *testing.T) time.Duration { return sshThrough(t, h, tunnelPort, 30*time.Second, journal) }
	// The outer machine may be a container image whose policy-rc.d forbids
	// starting services (Docker's does); a VPS has none, and the package
	// honours it (checked below), so the host gets none.
	h.Must("rm", "-f", "/usr/sbin/policy-rc.d")
	h.CopyIn(debA, "/root/tunnelsvc_first.deb", 0o644)
	h.CopyIn(debB, "/root/tunnelsvc_upgrade.deb", 0o644)

	// The operator's caddy, running its own site from the caddy package's
	// Caddyfile.
	h.WriteFile("/etc/caddy/Caddyfile", []byte("http://:8088 {\n\trespond \""+operatorSite+"\"\n}\n"), 0o644)
	h.Must("systemctl", "start", "caddy")
	operatorServed := func(when string) {
		t.Helper()
		testutil.Eventually(t, 15*time.Second, "the operator's site "+when, func() error {
			out, err := h.Exec("curl", "-fsS", "--max-time", "3", "http://127.0.0.1:8088/")
			if err != nil || out != operatorSite {
				return fmt.Errorf("%q %v", out, err)
			}
			return nil
		})
	}
	operatorServed("before the install")

	step("install beside a running caddy", func(t *testing.T) {
		caddyPID := v.show("caddy.service", "MainPID")["MainPID"]
		// Offline: the testbed has no route to any mirror.
		out, err := h.Exec("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "/root/tunnelsvc_first.deb")
		if err != nil {
			t.Fatalf("apt-get install: %v\n%s", err, out)
		}
		if !strings.Contains(out, "tunnelsvc: open the dashboard") {
			t.Fatalf("no first-run hint:\n%s", out)
		}
		if st := v.show("caddy.service", "MainPID", "ActiveState"); st["MainPID"] != caddyPID || st["ActiveState"] != "active" {
			t.Fatalf("caddy was disturbed by the install: %v (was pid %s)", st, caddyPID)
		}
		operatorServed("after the install")
		// The drop-in is in effect, and a restart before our Caddyfile
		// exists still serves the operator's site.
		if d := v.show("caddy.service", "DropInPaths")["DropInPaths"]; !strings.Contains(d, "caddy.service.d/tunnelsvc.conf") {
			t.Fatalf("caddy's drop-ins: %q", d)
		}
		h.Must("systemctl", "restart", "caddy")
		operatorServed("after a caddy restart")
		for _, u := range []string{"tunnelsvc.socket", "tunnelsvc-plugin.socket", "tunnelsvc-gate.socket"} {
			if st := v.show(u, "ActiveState", "UnitFileState"); st["ActiveState"] != "active" || st["UnitFileState"] != "enabled" {
				t.Fatalf("%s: %v", u, st)
			}
		}
		if st := v.show("tunnelsvc-firewall.service", "UnitFileState")["UnitFileState"]; st != "enabled" {
			t.Fatalf("tunnelsvc-firewall.service is %s", st)
		}
		if st := v.show("tunnelsvc.service", "ActiveState")["ActiveState"]; st != "inactive" {
			t.Fatalf("the daemon runs before any connection: %s", st)
		}
		h.Must("test", "-s", "/usr/share/doc/tunnelsvc/copyright")
		if c := h.Must("cat", "/usr/share/doc/tunnelsvc/copyright"); !strings.Contains(c, "Go module github.com/fatedier/frp "+testutil.FRPVersion(t)) || !strings.Contains(c, "Apache License") {
			t.Fatal("the copyright file lacks frp's licence")
		}
	})

	step("set up: proxy, firewall, a machine", func(t *testing.T) {
		// The address machines dial, as an operator sets it in the config
		// file (which the upgrade below must keep).
		h.Must("sh", "-c", "echo TUNNELSVC_SERVER_HOST="+pkgVPSIP+" >>/etc/tunnelsvc/tunnelsvc.env")
		v.data("POST", "/api/auth/setup", fmt.Sprintf(`{"password":%q}`, password), 200)
		v.data("POST", "/api/local/install", `{"domain":"example.test","server_host":"`+pkgVPSIP+`"}`, 200)
		testutil.Eventually(t, 60*time.Second, "install done", func() error {
			st := v.data("GET", "/api/local/status", "", 200)
			units, _ := st["units"].(map[string]any)
			rs, _ := units["revtunnel-server"].(map[string]any)
			if st["webproxy"] != "installed" || st["operation"] != nil || rs["active_state"] != "active" {
				return fmt.Errorf("status %v", st)
			}
			return nil
		})
		// The release's own frps.
		testutil.Eventually(t, 10*time.Second, "the release's frps runs", func() error {
			pid := v.show("revtunnel-server.service", "MainPID")["MainPID"]
			if ver, _ := h.Exec("/proc/"+pid+"/exe", "--version"); strings.TrimSpace(ver) != strings.TrimPrefix(testutil.FRPVersion(t), "v") {
				return fmt.Errorf("the running frps (pid %s) is version %q", pid, ver)
			}
			return nil
		})
		// caddy now serves our file, which imports the operator's.
		operatorServed("with our Caddyfile")
		testutil.Eventually(t, 15*time.Second, "our site in caddy", func() error {
			code, _ := h.Exec("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: router.example.test", "http://127.0.0.1/")
			if code != "308" {
				return fmt.Errorf("router.example.test over http: %q\n%s", code, journal())
			}
			return nil
		})

		v.data("POST", "/api/local/firewall/configure", `{"mode":"svc"}`, 200)
		testutil.Eventually(t, 30*time.Second, "table inet tunnelsvc", func() error {
			_, err := h.Exec("nft", "list", "table", "inet", "tunnelsvc")
			return err
		})

		tok := v.data("POST", "/api/bootstrap/tokens", `{}`, 200)
		// Made over loopback, the join command still names an address
		// machines reach: with the proxy installed, https://router.<domain>.
		if cmd, _ := tok["command"].(string); !strings.Contains(cmd, "https://router.example.test/static/bootstrap.sh") || strings.Contains(cmd, "127.0.0.1") {
			t.Fatalf("join command made over loopback: %q", cmd)
		}
		reg := v.data("POST", "/api/bootstrap", fmt.Sprintf(`{"token":%q,"name":"m1","username":"root"}`, tok["token"]), 200)
		tunnelPort = int(reg["tunnel_port"].(float64))
		conf, _ := reg["revtunnel_client_config"].(string)
		if !strings.Contains(conf, "serverAddr = '"+pkgVPSIP+"'") {
			t.Fatalf("client config:\n%s", conf)
		}

		// The machine: a real sshd on loopback:22 (dropbear) and frpc as
		// bootstrap.sh installs it (restart always, 5 s).
		if _, err := exec.LookPath("dropbear"); err != nil {
			t.Fatal("dropbear is missing (scripts/install-deps.sh installs dropbear-bin)")
		}
		h.Must("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", "/root/.ssh/id_ed25519")
		m.WriteFile("/root/.ssh/authorized_keys", []byte(h.Must("cat", "/root/.ssh/id_ed25519.pub")), 0o600)
		m.Must("chmod", "700", "/root/.ssh")
		m.Must("mkdir", "-p", "/etc/dropbear-test")
		m.Must("dropbearkey", "-t", "ed25519", "-f", "/etc/dropbear-test/host_ed25519")
		m.Must("systemd-run", "--unit=sshd-test", "/usr/sbin/dropbear", "-F", "-E", "-s", "-p", "127.0.0.1:22", "-r", "/etc/dropbear-test/host_ed25519")
		// A machine not updated since the frp before the release's: the
		// previous frpc must keep working against the release's frps and
		// the upgrade's.
		m.CopyIn(testutil.PreviousFRPC(t), "/usr/local/bin/revtunnel-client", 0o755)
		if got := m.Must("/usr/local/bin/revtunnel-client", "--version"); strings.TrimSpace(got) != strings.TrimPrefix(testutil.PreviousFRPVersion(t), "v") {
			t.Fatalf("the machine's frpc is %s", got)
		}
		m.WriteFile("/etc/revtunnel/client.toml", []byte(conf), 0o600)
		m.Must("systemd-run", "--unit=revtunnel-client", "-p", "Restart=always", "-p", "RestartSec=5",
			"/usr/local/bin/revtunnel-client", "-c", "/etc/revtunnel/client.toml")
		ssh(t)
	})
	if tunnelPort == 0 {
		t.Fatal("no machine joined")
	}

	step("reboot without touching the dashboard", func(t *testing.T) {
		h.Reboot()
		// Before any network: the table is back, loaded by its own unit,
		// and the daemon has not run in this boot.
		if _, err := h.Exec("nft", "list", "table", "inet", "tunnelsvc"); err != nil {
			t.Fatalf("no table inet tunnelsvc after the reboot: %v\n%s", err, journal())
		}
		if st := v.show("tunnelsvc-firewall.service", "ActiveState", "Result"); st["ActiveState"] != "active" || st["Result"] != "success" {
			t.Fatalf("tunnelsvc-firewall.service: %v", st)
		}
		if st := v.show("tunnelsvc.service", "ActiveState", "InvocationID"); st["ActiveState"] != "inactive" || st["InvocationID"] != "" {
			t.Fatalf("the daemon ran before anything asked for it: %v", st)
		}
		// Moving the database while a socket could start the daemon is
		// refused: db copy asks systemd over D-Bus (which starts nothing).
		out, err := h.Exec("tunnelsvc", "db", "copy", "--to", "postgres://tunnelsvc@127.0.0.1/tunnelsvc", "--data-dir", "/var/lib/tunnelsvc")
		if err == nil || !strings.Contains(out, "db copy: tunnelsvc.socket is active; stop tunnelsvc first") {
			t.Fatalf("db copy beside the active sockets: %v\n%s", err, out)
		}
		if st := v.show("tunnelsvc.service", "ActiveState")["ActiveState"]; st != "inactive" {
			t.Fatalf("db copy started the daemon: %s", st)
		}
		if st := v.show("revtunnel-server.service", "ActiveState")["ActiveState"]; st != "active" {
			t.Fatalf("revtunnel-server after the reboot: %s\n%s", st, journal())
		}
		// The machine's network comes back; its frpc logs in, frps asks
		// the daemon through the plugin socket, which starts it.
		// The old veth pair goes with the old host's network namespace;
		// delete the machine's end in case the kernel has not yet.
		m.Exec("ip", "link", "del", "eth0")
		testbed.Join(t, h, pkgVPSIP+"/24", m, pkgMachineIP+"/24")
		d := ssh(t)
		t.Logf("ssh through the machine's tunnel %s after the network came back", d.Round(time.Millisecond))
		if st := v.show("tunnelsvc.service", "ActiveState")["ActiveState"]; st != "active" {
			t.Fatalf("the daemon is %s after the machine logged in", st)
		}
	})

	step("upgrade", func(t *testing.T) {
		h.Must("systemctl", "start", "caddy")
		before := v.show("tunnelsvc.service", "InvocationID", "ActiveState")
		frpsBefore := v.show("revtunnel-server.service", "MainPID")["MainPID"]
		// Requests throughout the upgrade: none may fail.
		var ok, failed atomic.Int64
		var lastErr atomic.Value
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Get(dashboard + "/healthz")
				if err == nil && resp.StatusCode == 200 {
					ok.Add(1)
				} else {
					failed.Add(1)
					lastErr.Store(fmt.Sprint(time.Now().UTC().Format("15:04:05.000 "), err, resp))
				}
				if resp != nil {
					resp.Body.Close()
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		out, err := h.Exec("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "/root/tunnelsvc_upgrade.deb")
		time.Sleep(500 * time.Millisecond)
		close(stop)
		<-done
		if err != nil {
			t.Fatalf("upgrade: %v\n%s", err, out)
		}
		t.Logf("during the upgrade: %d requests answered, %d failed", ok.Load(), failed.Load())
		if failed.Load() != 0 || ok.Load() == 0 {
			journal, _ := h.Exec("journalctl", "--no-pager", "-n", "40", "-u", "tunnelsvc", "-u", "tunnelsvc.socket")
			t.Fatalf("%d requests failed during the upgrade (last: %v)\nthe daemon's journal:\n%s", failed.Load(), lastErr.Load(), journal)
		}
		if got := strings.TrimSpace(h.Must("dpkg-query", "-W", "-f", "${Version}", "tunnelsvc")); got != upgradeVersion {
			t.Fatalf("installed version %s", got)
		}
		after := v.show("tunnelsvc.service", "InvocationID", "ActiveState")
		if after["ActiveState"] != "active" || after["InvocationID"] == before["InvocationID"] {
			t.Fatalf("the daemon was not restarted: before %v, after %v", before, after)
		}
		var frps map[string]string
		testutil.Eventually(t, 15*time.Second, "frps restarted", func() error {
			frps = v.show("revtunnel-server.service", "MainPID", "ActiveState")
			if frps["ActiveState"] != "active" || frps["MainPID"] == frpsBefore || frps["MainPID"] == "0" {
				return fmt.Errorf("revtunnel-server: %v (was pid %s)", frps, frpsBefore)
			}
			return nil
		})
		// (Type=simple is "active" from the fork; the exec follows.)
		testutil.Eventually(t, 10*time.Second, "the new frps runs", func() error {
			pid := v.show("revtunnel-server.service", "MainPID")["MainPID"]
			if ver, _ := h.Exec("/proc/"+pid+"/exe", "--version"); strings.TrimSpace(ver) != upgradedFRPS {
				return fmt.Errorf("the running frps (pid %s) is version %q\n%s", pid, ver, journal())
			}
			return nil
		})
		// The data is kept: the session and the machine are still there.
		if ms := v.machines(); len(ms) != 1 || ms[0]["name"] != "m1" {
			t.Fatalf("machines after the upgrade: %v", ms)
		}
		if env := h.Must("cat", "/etc/tunnelsvc/tunnelsvc.env"); !strings.Contains(env, "TUNNELSVC_SERVER_HOST="+pkgVPSIP) {
			t.Fatalf("the operator's setting is gone from tunnelsvc.env:\n%s", env)
		}
		ssh(t)
		siteAsRoot(t, h)
	})

	step("upgrade respects policy-rc.d and a disabled socket", func(t *testing.T) {
		reinstall := func() {
			t.Helper()
			if out, err := h.Exec("env", "DEBIAN_FRONTEND=noninteractive", "dpkg", "-i", "/root/tunnelsvc_upgrade.deb"); err != nil {
				t.Fatalf("dpkg -i: %v\n%s", err, out)
			}
		}
		h.WriteFile("/usr/sbin/policy-rc.d", []byte("#!/bin/sh\nexit 101\n"), 0o755)
		// frps stops too: the machine's frpc pings every 10 s, and a ping
		// through the (enabled) plugin socket starts the daemon, whose
		// unit pulls in tunnelsvc.socket whatever its enable state. What
		// is checked here is what the upgrade itself starts.
		h.Must("systemctl", "stop", "revtunnel-server.service")
		h.Must("systemctl", "stop", "tunnelsvc.socket", "tunnelsvc-plugin.socket", "tunnelsvc-gate.socket", "tunnelsvc.service")
		reinstall()
		h.Must("rm", "/usr/sbin/policy-rc.d")
		if st := v.show("tunnelsvc.socket", "ActiveState")["ActiveState"]; st != "inactive" {
			t.Fatalf("policy-rc.d said no, yet tunnelsvc.socket is %s", st)
		}
		h.Must("systemctl", "disable", "tunnelsvc.socket")
		reinstall()
		if st := v.show("tunnelsvc.socket", "ActiveState", "UnitFileState"); st["ActiveState"] != "inactive" || st["UnitFileState"] != "disabled" {
			t.Fatalf("the admin's disabled socket after an upgrade: %v", st)
		}
		h.Must("systemctl", "enable", "--now", "tunnelsvc.socket", "tunnelsvc-plugin.socket", "tunnelsvc-gate.socket")
		h.Must("systemctl", "start", "revtunnel-server.service")
		if a := v.do("GET", "/healthz", ""); a.status != 200 {
			t.Fatalf("GET /healthz: %d %s", a.status, a.raw)
		}
	})

	step("remove", func(t *testing.T) {
		if st := v.show("caddy.service", "ActiveState")["ActiveState"]; st != "active" {
			t.Fatalf("caddy is %s before the removal", st)
		}
		out, err := h.Exec("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "remove", "-y", "tunnelsvc")
		if err != nil {
			t.Fatalf("remove: %v\n%s", err, out)
		}
		// frps stays down: it neither runs from its deleted binary nor loops
		// on a missing one (its RestartSec is 2 s).
		time.Sleep(3 * time.Second)
		if out, err := h.Exec("pgrep", "-a", "frps"); err == nil {
			t.Fatalf("frps still runs:\n%s", out)
		}
		for _, u := range []string{"revtunnel-server.service", "tunnelsvc.service", "tunnelsvc.socket", "tunnelsvc-plugin.socket", "tunnelsvc-gate.socket", "tunnelsvc-local.socket", "tunnelsvc-firewall.service"} {
			if st := v.show(u, "ActiveState", "LoadState"); st["ActiveState"] != "inactive" || st["LoadState"] != "not-found" {
				t.Fatalf("%s after remove: %v", u, st)
			}
		}
		if ss := h.Must("ss", "-Hltn"); strings.Contains(ss, ":7380 ") || strings.Contains(ss, ":7381 ") || strings.Contains(ss, ":7382 ") {
			t.Fatalf("our ports are still open:\n%s", ss)
		}
		if _, err := h.Exec("nft", "list", "table", "inet", "tunnelsvc"); err == nil {
			t.Fatal("table inet tunnelsvc is still loaded")
		}
		if left := h.Must("sh", "-c", "find /etc/systemd /lib/systemd/system \\( -name '*tunnelsvc*' -o -name 'revtunnel*' \\) -print"); strings.TrimSpace(left) != "" {
			t.Fatalf("unit files or enable links left:\n%s", left)
		}
		// caddy serves its own configuration again, without a manual
		// daemon-reload.
		if st := v.show("caddy.service", "ActiveState", "DropInPaths"); st["ActiveState"] != "active" || strings.Contains(st["DropInPaths"], "tunnelsvc") {
			t.Fatalf("caddy after remove: %v", st)
		}
		operatorServed("after the removal")
		if cfg := h.Must("curl", "-fsS", "http://localhost:2019/config/"); strings.Contains(cfg, "example.test") {
			t.Fatalf("caddy still serves our sites: %s", cfg)
		}
		// Removal keeps the data.
		h.Must("test", "-s", "/var/lib/tunnelsvc/tunnelsvc.db")
	})

	step("purge", func(t *testing.T) {
		// The ban tool's two files, where the daemon's set-up writes them
		// (setting up fail2ban itself is not this test's subject).
		h.WriteFile("/etc/fail2ban/jail.d/tunnelsvc.local", []byte("[tunnelsvc-auth]\nenabled = false\n"), 0o644)
		h.WriteFile("/etc/fail2ban/filter.d/tunnelsvc-auth.conf", []byte("[Definition]\nfailregex =\n"), 0o644)
		out, err := h.Exec("env", "DEBIAN_FRONTEND=noninteractive", "dpkg", "--purge", "tunnelsvc")
		if err != nil {
			t.Fatalf("purge: %v\n%s", err, out)
		}
		if n := len(regexp.MustCompile(`(?m)^tunnelsvc: deleting the database and secret key`).FindAllString(out, -1)); n != 1 {
			t.Fatalf("want one line about deleting the database and key, got %d:\n%s", n, out)
		}
		if st, _ := h.Exec("dpkg-query", "-W", "-f", "${db:Status-Status}", "tunnelsvc"); strings.TrimSpace(st) != "not-installed" && !strings.Contains(st, "no packages found") {
			t.Fatalf("dpkg still knows tunnelsvc: %q", st)
		}
		// The test's own copies of the packages are not the package's.
		h.Must("rm", "/root/tunnelsvc_first.deb", "/root/tunnelsvc_upgrade.deb")
		// Nothing of ours on the host's disk: every file the host wrote is
		// in its upper dir (whiteouts, char devices 0/0, mark deletions).
		var left []string
		upper := filepath.Join(h.Dir, "upper")
		filepath.Walk(upper, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.Mode()&os.ModeCharDevice != 0 {
				return nil
			}
			rel := strings.TrimPrefix(p, upper)
			name := strings.ToLower(filepath.Base(p))
			if strings.Contains(name, "tunnelsvc") || strings.Contains(name, "revtunnel") || strings.HasPrefix(rel, "/etc/tunnelsvc") || strings.HasPrefix(rel, "/var/lib/tunnelsvc") {
				left = append(left, rel)
			}
			return nil
		})
		if len(left) != 0 {
			t.Fatalf("left after purge:\n%s", strings.Join(left, "\n"))
		}
	})
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}

// sshThrough waits (at most d) until ssh reaches the machine through its
// tunnel port on the VPS (a real ssh client and sshd, through frps and frpc), and returns how long that took.
func sshThrough(t *testing.T, h *testbed.Host, port int, d time.Duration, journal func() string) time.Duration {
	t.Helper()
	return sshThroughTo(t, h, port, "machine", d, journal)
}

// sshThroughTo is sshThrough to the machine whose hostname is want.
func sshThroughTo(t *testing.T, h *testbed.Host, port int, want string, d time.Duration, journal func() string) time.Duration {
	t.Helper()
	var last string
	start := time.Now()
	for time.Since(start) < d {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		out, err := exec.CommandContext(ctx, "bash", filepath.Join(testbed.Root(t), "scripts", "testbed.sh"), "exec", h.Dir,
			"ssh", "-i", "/root/.ssh/id_ed25519", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
			"-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=3", "-o", "LogLevel=ERROR",
			"-p", fmt.Sprint(port), "root@127.0.0.1", "hostname").CombinedOutput()
		cancel()
		if err == nil && strings.TrimSpace(string(out)) == want {
			return time.Since(start)
		}
		last = fmt.Sprintf("%v: %s", err, out)
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("no ssh through the tunnel within %s (last: %s)\n%s", d, last, journal())
	return 0
}

// checkRPM reads the .rpm's metadata and scripts with rpm -qp.
func checkRPM(t *testing.T, path string) {
	if _, err := exec.LookPath("rpm"); err != nil {
		t.Fatal("rpm is missing (scripts/install-deps.sh installs it)")
	}
	q := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("rpm", append([]string{"-qp"}, append(args, path)...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("rpm -qp %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if req := q("--requires"); !strings.Contains(req, "glibc >= 2.34") || !strings.Contains(req, "systemd") {
		t.Fatalf("Requires:\n%s", req)
	}
	if rec := q("--recommends"); !strings.Contains(rec, "caddy") || !strings.Contains(rec, "nftables") || !strings.Contains(rec, "fail2ban") {
		t.Fatalf("Recommends:\n%s", rec)
	}
	scripts := q("--scripts")
	for _, want := range []string{"postinstall scriptlet", "preuninstall scriptlet", "postuninstall scriptlet",
		"systemctl --no-reload preset", "systemctl --no-reload disable --now", "nft delete table inet tunnelsvc", "try-restart caddy.service"} {
		if !strings.Contains(scripts, want) {
			t.Fatalf("rpm scripts lack %q:\n%s", want, scripts)
		}
	}
	// Units in %{_unitdir}, and the package owns its directories.
	for _, u := range []string{"tunnelsvc.socket", "tunnelsvc-plugin.socket", "tunnelsvc-gate.socket", "tunnelsvc-local.socket", "tunnelsvc.service", "tunnelsvc-firewall.service", "revtunnel-server.service", "caddy.service.d/tunnelsvc.conf"} {
		if files := q("-l"); !strings.Contains(files, "/usr/lib/systemd/system/"+u+"\n") {
			t.Fatalf("the rpm has no /usr/lib/systemd/system/%s:\n%s", u, files)
		}
	}
	dirs := q("--qf", "[%{FILEMODES:perms} %{FILENAMES}\n]")
	for _, d := range []string{"/usr/lib/tunnelsvc", "/etc/tunnelsvc", "/etc/revtunnel", "/usr/share/doc/tunnelsvc", "/usr/lib/tunnelsvc/static", "/usr/lib/systemd/system/caddy.service.d"} {
		if !regexp.MustCompile(`(?m)^d\S* ` + regexp.QuoteMeta(d) + `$`).MatchString(dirs) {
			t.Fatalf("the rpm does not own %s:\n%s", d, dirs)
		}
	}
}

// siteAsRoot: root on the VPS runs export and apply as docs/automation.md
// says, through the local socket the upgrade brought (enabled, 0600), with
// no token.
func siteAsRoot(t *testing.T, h *testbed.Host) {
	t.Helper()
	if st := h.Must("systemctl", "show", "-p", "ActiveState", "-p", "UnitFileState", "tunnelsvc-local.socket"); !strings.Contains(st, "ActiveState=active") || !strings.Contains(st, "UnitFileState=enabled") {
		t.Fatalf("tunnelsvc-local.socket after the upgrade:\n%s", st)
	}
	if mode := h.Must("stat", "-c", "%a %U %F", "/run/tunnelsvc/api.sock"); strings.TrimSpace(mode) != "600 root socket" {
		t.Fatalf("/run/tunnelsvc/api.sock: %s", mode)
	}
	exported := h.Must("tunnelsvc", "export")
	if !strings.Contains(exported, "domain: example.test") || !strings.Contains(exported, "- m1") {
		t.Fatalf("export:\n%s", exported)
	}
	with := strings.Replace(exported, "tunnels: []", "tunnels:\n  - {name: db, machine: m1, kind: tcp, port: 5432}", 1)
	h.WriteFile("/root/site.yaml", []byte(with), 0o600)
	if out := h.Must("tunnelsvc", "apply", "-f", "/root/site.yaml"); out != "+ tunnel db on m1 (tcp 5432)\napplied 1 change\n" {
		t.Fatalf("apply:\n%s", out)
	}
	if out := h.Must("tunnelsvc", "apply", "-f", "/root/site.yaml"); out != "no changes\n" {
		t.Fatalf("apply again:\n%s", out)
	}
	h.WriteFile("/root/site.yaml", []byte(exported), 0o600)
	if out := h.Must("tunnelsvc", "apply", "--prune", "-f", "/root/site.yaml"); out != "- tunnel db on m1 (tcp 5432)\napplied 1 change\n" {
		t.Fatalf("apply --prune:\n%s", out)
	}
}
