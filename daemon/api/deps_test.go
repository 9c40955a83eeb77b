package api

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDependencyDirection keeps the API layer away from the OS: it calls
// domain packages, which reach systemd, commands and files through small
// interfaces that tests can replace.
func TestDependencyDirection(t *testing.T) {
	forbidden := []string{"os/exec", "github.com/coreos/go-systemd", "syscall"}
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if path == bad || strings.HasPrefix(path, bad+"/") {
					t.Errorf("%s imports %s; reach the OS through a domain package", f, path)
				}
			}
		}
	}
}

// Not even transitively: the unit layer's interface lives in package units,
// its D-Bus code in units/sdbus, which only the tunnelsvc command imports
// (and gives the daemon it serves). systemd's socket activation and
// readiness notices (go-systemd's activation and daemon) are not D-Bus.
func TestNoDBusBelowAPI(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/coreos/go-systemd/v22/dbus", "github.com/godbus/dbus"} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("package api depends on %s", dep)
			}
		}
	}
}
