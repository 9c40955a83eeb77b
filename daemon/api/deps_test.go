package api

import (
	"os/exec"
	"strings"
	"testing"
)

// The API calls domain packages and never reaches the OS itself: no D-Bus,
// no child processes, not even transitively (ARCHITECTURE: dependency
// direction).
func TestDependencyDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/coreos/go-systemd", "github.com/godbus/dbus", "os/exec"} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("package api depends on %s", dep)
			}
		}
	}
}
