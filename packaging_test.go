package tunnelsvc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMaintainerScriptsShellcheck: the package's maintainer scripts and
// caddy's start wrapper pass shellcheck.
func TestMaintainerScriptsShellcheck(t *testing.T) {
	if _, err := exec.LookPath("shellcheck"); err != nil {
		t.Fatal("shellcheck is missing: run scripts/install-deps.sh (apt-get install shellcheck)")
	}
	scripts, _ := filepath.Glob("packaging/*/*")
	scripts = append(scripts, "packaging/caddy-run", "scripts/pkg-version.sh", "scripts/copyright.sh")
	if len(scripts) < 7 {
		t.Fatalf("maintainer scripts not found: %v", scripts)
	}
	for _, s := range scripts {
		out, err := exec.Command("shellcheck", "--severity=style", s).CombinedOutput()
		if err != nil {
			t.Errorf("shellcheck %s: %v\n%s", s, err, out)
		}
	}
}

// TestPackageVersionsIncrease: every commit's package version is greater
// than the previous commit's, for dpkg and for rpm, tagged or not (an
// abbreviated hash alone orders builds at random).
func TestPackageVersionsIncrease(t *testing.T) {
	for _, tool := range []string{"git", "dpkg", "rpm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (scripts/install-deps.sh installs it)", tool)
		}
	}
	script, err := filepath.Abs("scripts/pkg-version.sh")
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	version := func() string {
		t.Helper()
		cmd := exec.Command("sh", script)
		cmd.Dir = repo
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("pkg-version.sh: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	greater := func(a, b string) {
		t.Helper()
		if err := exec.Command("dpkg", "--compare-versions", a, "gt", b).Run(); err != nil {
			t.Errorf("dpkg: %s is not greater than %s", a, b)
		}
		out, err := exec.Command("rpm", "--eval", `%{lua: print(rpm.vercmp("`+a+`", "`+b+`"))}`).Output()
		if err != nil || strings.TrimSpace(string(out)) != "1" {
			t.Errorf("rpm: vercmp(%s, %s) = %q %v, want 1", a, b, out, err)
		}
	}
	git("init", "-q")
	var prev string
	commit := func(i int) string {
		t.Helper()
		os.WriteFile(filepath.Join(repo, "f"), []byte{byte(i)}, 0o644)
		git("add", "f")
		git("commit", "-q", "-m", "c")
		v := version()
		if prev != "" {
			greater(v, prev)
		}
		prev = v
		return v
	}
	// Enough commits that the hashes alone would be out of order.
	for i := 1; i <= 12; i++ {
		if v := commit(i); !strings.HasPrefix(v, "0.1.0+git") {
			t.Fatalf("untagged version %q", v)
		}
	}
	git("tag", "v1.2.0")
	if v := version(); v != "1.2.0" {
		t.Fatalf("tagged version %q, want 1.2.0", v)
	}
	greater("1.2.0", prev)
	prev = "1.2.0"
	for i := 13; i <= 16; i++ {
		if v := commit(i); !strings.HasPrefix(v, "1.2.0+git") {
			t.Fatalf("version after the tag %q", v)
		}
	}
}

// TestCopyrightPatchedModule: a module replaced by a patched copy in
// third_party/ ships with that copy's licence, named by the module it
// replaces.
func TestCopyrightPatchedModule(t *testing.T) {
	// The binary the package ships (make build).
	if _, err := os.Stat("bin/tunnelsvc"); err != nil {
		t.Fatalf("bin/tunnelsvc (built by `make build`): %v", err)
	}
	out, err := exec.Command("bash", "scripts/copyright.sh", "packaging/copyright", "bin/tunnelsvc").Output()
	if err != nil {
		t.Fatalf("copyright.sh: %v", err)
	}
	lic, err := os.ReadFile("third_party/zxcvbn-go/LICENSE.txt")
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	if !strings.Contains(text, "Comment: Go module github.com/nbutton23/zxcvbn-go (patched copy in third_party/zxcvbn-go)") {
		t.Errorf("copyright file does not name the patched zxcvbn-go copy:\n%s", text)
	}
	firstLine, _, _ := strings.Cut(string(lic), "\n")
	if !strings.Contains(text, " "+strings.TrimSpace(firstLine)) {
		t.Errorf("copyright file lacks the licence of third_party/zxcvbn-go (%q)", firstLine)
	}
}

// TestShippedBinaryIsNotTheTestBuild: the daemon the package ships is not
// the dashboard tests' build (tag tunnelsvc_uitest, which hashes passwords
// at a low cost), and the package takes it from bin/, not bin/test/.
func TestShippedBinaryIsNotTheTestBuild(t *testing.T) {
	out, err := exec.Command("go", "version", "-m", "bin/tunnelsvc").CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m bin/tunnelsvc (built by `make build`): %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "\tpath\tgithub.com/tunnelsvc/tunnelsvc/daemon/cmd/tunnelsvc") {
		t.Fatalf("bin/tunnelsvc is not the daemon:\n%s", out)
	}
	if strings.Contains(string(out), "tunnelsvc_uitest") {
		t.Fatalf("bin/tunnelsvc was built with the dashboard tests' tag:\n%s", out)
	}
	cfg, err := os.ReadFile("nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cfg), "src: bin/tunnelsvc\n") || strings.Contains(string(cfg), "bin/test/") {
		t.Fatalf("nfpm.yaml does not ship bin/tunnelsvc alone")
	}
}

// TestCopyrightPatchedEngineModule: frps is built in tools/frp, whose
// go.mod names the patched yamux by a path relative to itself; the
// copyright file still carries that copy's licence.
func TestCopyrightPatchedEngineModule(t *testing.T) {
	if _, err := os.Stat("bin/frps"); err != nil {
		t.Fatalf("bin/frps (built by `make frp`): %v", err)
	}
	out, err := exec.Command("bash", "scripts/copyright.sh", "packaging/copyright", "bin/frps").Output()
	if err != nil {
		t.Fatalf("copyright.sh: %v", err)
	}
	text := string(out)
	if !strings.Contains(text, "Comment: Go module github.com/hashicorp/yamux (patched copy in third_party/yamux)") {
		t.Fatalf("copyright file does not name the patched yamux copy:\n%s", text)
	}
	if !strings.Contains(text, " Mozilla Public License, version 2.0") {
		t.Errorf("copyright file lacks the licence of third_party/yamux (MPL-2.0)")
	}
}

// TestStaticVersionFile: make writes bin/static/VERSION, which the package
// ships with the rest of bin/static, and rewrites it only when the version
// changes: its mtime keys the daemon's bundle cache, and make stays
// incremental.
func TestStaticVersionFile(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	nfpm, err := os.ReadFile("nfpm.yaml")
	if err != nil || !strings.Contains(string(nfpm), "- src: bin/static/\n    dst: /usr/lib/tunnelsvc/static\n    type: tree") {
		t.Fatalf("nfpm.yaml does not ship bin/static as a tree (%v)", err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "VERSION")
	mk := func(version string) os.FileInfo {
		t.Helper()
		if out, err := exec.Command("make", "-s", "STATIC="+dir, "VERSION="+version, file).CombinedOutput(); err != nil {
			t.Fatalf("make %s: %v\n%s", file, err, out)
		}
		st, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	first := mk("1.2.3")
	past := first.ModTime().Add(-time.Hour)
	os.Chtimes(file, past, past)
	if again := mk("1.2.3"); !again.ModTime().Equal(past) {
		t.Errorf("the same version rewrote VERSION")
	}
	mk("1.2.4")
	if b, _ := os.ReadFile(file); string(b) != "1.2.4\n" {
		t.Errorf("VERSION = %q, want 1.2.4", b)
	}
}
