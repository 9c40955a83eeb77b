package apicheck

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNotInTheBinary: the validator and kin-openapi are for tests; the
// daemon never links them.
func TestNotInTheBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../../cmd/tunnelsvc").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/getkin/") || strings.HasSuffix(dep, "/internal/apicheck") {
			t.Errorf("the tunnelsvc binary depends on %s", dep)
		}
	}
}
