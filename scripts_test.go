package tunnelsvc

import (
	"os/exec"
	"strings"
	"testing"
)

// TestScriptsShellcheck: the scripts machines run pass shellcheck
// (scripts/install-deps.sh installs it).
func TestScriptsShellcheck(t *testing.T) {
	if _, err := exec.LookPath("shellcheck"); err != nil {
		t.Fatal("shellcheck is missing: run scripts/install-deps.sh (apt-get install shellcheck)")
	}
	for _, s := range []string{"scripts/bootstrap.sh", "scripts/tunnel-uninstall.sh", "packaging/unpublish.sh"} {
		out, err := exec.Command("shellcheck", "--severity=style", s).CombinedOutput()
		if err != nil {
			t.Errorf("shellcheck %s: %v\n%s", s, err, out)
		}
	}
}

// TestBootstrapUsage: without a token the script prints its usage and
// exits 2, before touching anything.
func TestBootstrapUsage(t *testing.T) {
	out, err := exec.Command("bash", "scripts/bootstrap.sh").CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "usage: bash bootstrap.sh <TOKEN>") {
		t.Fatalf("no token: %v\n%s", err, out)
	}
	// No terminal and no TUNNEL_MACHINE_NAME: a clear refusal.
	cmd := exec.Command("setsid", "bash", "scripts/bootstrap.sh", "abc")
	cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin"}
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no terminal (/dev/tty)") {
		t.Fatalf("no terminal: %v\n%s", err, out)
	}
}
