package revtunnel_test

import (
	"debug/buildinfo"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// TestEnginesBuiltLikeUpstream: frp's own go.mod replaces some of its
// dependencies (hashicorp/yamux with frp's fork, which has the stream
// fixes frp relies on). A dependency's replace directives do not apply to
// the module that builds it, so tools/frp must carry them itself; this
// reads them from the pinned frp's go.mod and checks that the shipped
// frps and frpc were built with each one, or with a patched copy of it in
// third_party/ whose README.tunnelsvc.md names that very version as its
// upstream.
func TestEnginesBuiltLikeUpstream(t *testing.T) {
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tools := filepath.Join(root, "tools", "frp")
	out, err := exec.Command("go", "-C", tools, "list", "-m", "-f", "{{.GoMod}}", "github.com/fatedier/frp").Output()
	if err != nil {
		t.Fatalf("go list the pinned frp: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	out, err = exec.Command("go", "mod", "edit", "-json", gomod).Output()
	if err != nil {
		t.Fatalf("go mod edit -json %s: %v", gomod, err)
	}
	type mod struct{ Path, Version string }
	var upstream struct {
		Replace []struct{ Old, New mod }
	}
	if err := json.Unmarshal(out, &upstream); err != nil {
		t.Fatal(err)
	}
	if len(upstream.Replace) == 0 {
		t.Fatalf("%s has no replace directive; this test has nothing to check", gomod)
	}
	for _, bin := range []string{frps, frpc} {
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			t.Fatalf("read the build info of %s: %v", bin, err)
		}
		for _, r := range upstream.Replace {
			found := false
			for _, d := range info.Deps {
				if d.Path != r.Old.Path {
					continue
				}
				found = true
				if d.Replace != nil && d.Replace.Version == "(devel)" {
					// A directory, relative to tools/frp.
					readme := filepath.Join(tools, d.Replace.Path, "README.tunnelsvc.md")
					b, err := os.ReadFile(readme)
					if err != nil {
						t.Errorf("%s is built with the copy in %s, which has no README.tunnelsvc.md naming its upstream: %v", filepath.Base(bin), d.Replace.Path, err)
						continue
					}
					if want := "Upstream: " + r.New.Path + " " + r.New.Version + "\n"; !strings.Contains(string(b), want) {
						t.Errorf("%s is built with the copy in %s, whose README.tunnelsvc.md lacks %q: frp's go.mod replaces %s with %s@%s (bring the copy to that version)",
							filepath.Base(bin), d.Replace.Path, strings.TrimSpace(want), r.Old.Path, r.New.Path, r.New.Version)
					}
					continue
				}
				if d.Replace == nil || d.Replace.Path != r.New.Path || d.Replace.Version != r.New.Version {
					got := d.Path + "@" + d.Version
					if d.Replace != nil {
						got = d.Replace.Path + "@" + d.Replace.Version
					}
					t.Errorf("%s is built with %s; frp's go.mod replaces it with %s@%s (add the replace to tools/frp/go.mod)",
						filepath.Base(bin), got, r.New.Path, r.New.Version)
				}
			}
			if !found {
				t.Logf("%s does not link %s", filepath.Base(bin), r.Old.Path)
			}
		}
	}
}
