package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// golden compares got with testdata/name (or writes it with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (run go test -update and review the diff):\n%s", name, got)
	}
}

func TestGolden(t *testing.T) {
	golden(t, "revtunnel-client.service", ClientUnit())
	golden(t, "revtunnel-client@.service", EdgeClientUnit())
	golden(t, "tunnel-agent.service", AgentUnit())
	golden(t, "sudoers-tunnel-agent", AgentSudoers())
	if strings.Contains(AgentUnit(), "127.0.0.1") {
		t.Error("the agent unit names a port: one bundle serves every machine")
	}
}

// The unit files pass systemd's own check. verify wants the executables
// to exist, so they point at stand-ins in a temporary directory.
func TestUnitsVerify(t *testing.T) {
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	for _, name := range []string{"revtunnel-client", "tunnel-agent"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The template is checked as an instance of it (verify wants one).
	for name, text := range map[string]string{"revtunnel-client.service": ClientUnit(), "tunnel-agent.service": AgentUnit(),
		"revtunnel-client@edge-b.service": EdgeClientUnit()} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(strings.ReplaceAll(text, "/usr/local/bin/", bin+"/")), 0o644)
		out, err := exec.Command(tool, "verify", p).CombinedOutput()
		if err != nil {
			t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, out)
		}
	}
}

// The sudo rules pass visudo once systemctl's path is in, as on a machine.
func TestSudoersVisudo(t *testing.T) {
	tool, err := exec.LookPath("visudo")
	if err != nil {
		if _, err := os.Stat("/usr/sbin/visudo"); err != nil {
			t.Skip("visudo is not installed (the sudo package); CI installs it")
		}
		tool = "/usr/sbin/visudo"
	}
	text := AgentSudoers()
	if strings.Count(text, SystemctlPlaceholder) != 1 {
		t.Fatalf("the sudo rules name %s %d times, want once", SystemctlPlaceholder, strings.Count(text, SystemctlPlaceholder))
	}
	p := filepath.Join(t.TempDir(), "sudoers-tunnel-agent")
	os.WriteFile(p, []byte(strings.ReplaceAll(text, SystemctlPlaceholder, "/usr/bin/systemctl")), 0o440)
	if out, err := exec.Command(tool, "-cf", p).CombinedOutput(); err != nil {
		t.Errorf("visudo -cf refused the sudo rules: %v\n%s", err, out)
	}
}

// staticDir lays out what `make build` writes into bin/static.
func staticDir(t *testing.T, version string) string {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "agents"), 0o755)
	os.MkdirAll(filepath.Join(dir, "revtunnel"), 0o755)
	os.WriteFile(filepath.Join(dir, "VERSION"), []byte(version+"\n"), 0o644)
	for _, arch := range Arches {
		os.WriteFile(filepath.Join(dir, "agents", "tunnel-agent-linux-"+arch), []byte("agent "+arch), 0o755)
		os.WriteFile(filepath.Join(dir, "revtunnel", "revtunnel-client-linux-"+arch), []byte("client "+arch), 0o755)
	}
	return dir
}

type entry struct {
	mode int64
	uid  int
	body string
}

func unpack(t *testing.T, data []byte) (names []string, files map[string]entry) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files = map[string]entry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			t.Errorf("%s: type %c, want regular files only", h.Name, h.Typeflag)
		}
		b, _ := io.ReadAll(tr)
		names = append(names, h.Name)
		files[h.Name] = entry{h.Mode, h.Uid, string(b)}
	}
}

func TestBuild(t *testing.T) {
	dir := staticDir(t, "1.4.0")
	b, err := Build(dir, "arm64")
	if err != nil {
		t.Fatal(err)
	}
	if b.Version != "1.4.0" || b.Size != int64(len(b.Data)) || len(b.SHA256) != 64 {
		t.Fatalf("bundle %q size %d (data %d) sha %q", b.Version, b.Size, len(b.Data), b.SHA256)
	}
	names, files := unpack(t, b.Data)
	want := map[string]entry{
		"VERSION":                  {0o644, 0, "1.4.0\n"},
		"tunnel-agent":             {0o755, 0, "agent arm64"},
		"revtunnel-client":         {0o755, 0, "client arm64"},
		"revtunnel-client.service": {0o644, 0, ClientUnit()},
		"tunnel-agent.service":     {0o644, 0, AgentUnit()},
		"sudoers-tunnel-agent":     {0o440, 0, AgentSudoers()},
	}
	if len(names) != len(want) {
		t.Errorf("entries %v, want the %d of the contract", names, len(want))
	}
	for name, w := range want {
		if files[name] != w {
			t.Errorf("%s: %+v, want %+v", name, files[name], w)
		}
	}

	// Built again from a copy made later: the same bytes.
	again := staticDir(t, "1.4.0")
	time.Sleep(10 * time.Millisecond)
	b2, err := Build(again, "arm64")
	if err != nil {
		t.Fatal(err)
	}
	if b2.SHA256 != b.SHA256 {
		t.Errorf("the same inputs gave another SHA-256: %s then %s", b.SHA256, b2.SHA256)
	}
}

// A new VERSION or binary is seen at once, however the cache stands.
func TestBuildFollowsChanges(t *testing.T) {
	dir := staticDir(t, "1.4.0")
	b1, err := Build(dir, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "VERSION"), []byte("1.5.0\n"), 0o644)
	b2, err := Build(dir, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if b2.Version != "1.5.0" || b2.SHA256 == b1.SHA256 {
		t.Fatalf("after VERSION changed: version %q sha %s (was %s)", b2.Version, b2.SHA256, b1.SHA256)
	}
	p := filepath.Join(dir, "agents", "tunnel-agent-linux-amd64")
	os.WriteFile(p, []byte("agent amd64 v2"), 0o755)
	b3, _ := Build(dir, "amd64")
	if _, files := unpack(t, b3.Data); files["tunnel-agent"].body != "agent amd64 v2" {
		t.Errorf("the bundle still carries the old agent: %q", files["tunnel-agent"].body)
	}
}

func TestBuildErrors(t *testing.T) {
	dir := staticDir(t, "1.4.0")
	if _, err := Build(dir, "arm"); err == nil || !strings.Contains(err.Error(), "amd64 and arm64") {
		t.Errorf("arm: %v", err)
	}
	os.Remove(filepath.Join(dir, "VERSION"))
	_, err := Build(dir, "amd64")
	var missing *MissingError
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), "VERSION does not exist: run `make build`") {
		t.Errorf("without VERSION: %v", err)
	}
	if _, err := Version(dir); !errors.As(err, &missing) {
		t.Errorf("Version without the file: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "VERSION"), []byte("\n"), 0o644)
	if _, err := Version(dir); err == nil || !strings.Contains(err.Error(), "one version on one line") {
		t.Errorf("empty VERSION: %v", err)
	}
}

// TestVersionFollowsTheFile: the version read is kept between calls, yet a
// new VERSION, even of the same length and written within the same
// second, is what the next call answers.
func TestVersionFollowsTheFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "VERSION")
	write := func(v string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := func(v string) {
		t.Helper()
		got, err := Version(dir)
		if err != nil || got != v {
			t.Fatalf("Version = %q, %v; want %q", got, err, v)
		}
	}
	write("1.0.0")
	old := time.Now().Add(-2 * time.Second)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	want("1.0.0")
	want("1.0.0") // from memory
	write("1.0.1")
	want("1.0.1")
	write("1.0.2")
	want("1.0.2")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	var missing *MissingError
	if _, err := Version(dir); !errors.As(err, &missing) {
		t.Fatalf("Version with no file: %v, want a MissingError", err)
	}
}
