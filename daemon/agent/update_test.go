package agent_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
)

type tarEntry struct {
	name, body string
	typ        byte
}

// bundleEntries is a good bundle of version v.
func bundleEntries(v, client string) []tarEntry {
	return []tarEntry{
		{name: "VERSION", body: v + "\n"},
		{name: "tunnel-agent", body: "agent " + v},
		{name: "revtunnel-client", body: client},
		{name: "revtunnel-client.service", body: "[Service]\nExecStart=/usr/local/bin/revtunnel-client\n"},
		{name: "tunnel-agent.service", body: "[Service]\nExecStart=/usr/local/bin/tunnel-agent serve # " + v + "\n"},
		{name: "sudoers-tunnel-agent", body: "Defaults:tunnel !requiretty\ntunnel ALL=(root) NOPASSWD: @SYSTEMCTL@ restart revtunnel-client.service\n"},
	}
}

func makeBundle(t *testing.T, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: typ, ModTime: time.Unix(1_700_000_000, 0)}
		switch typ {
		case tar.TypeReg:
			hdr.Size = int64(len(e.body))
		case tar.TypeSymlink:
			hdr.Linkname = e.body
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// machineA is what bootstrap.sh left on a machine of version A: the
// installed files, each path under root with its content.
var machineA = map[string]string{
	"/usr/local/bin/tunnel-agent":                  "agent A",
	"/usr/local/bin/revtunnel-client":              "client 0.61",
	"/etc/systemd/system/revtunnel-client.service": "[Service]\nExecStart=/usr/local/bin/revtunnel-client\n",
	"/etc/systemd/system/tunnel-agent.service":     "[Service]\nExecStart=/usr/local/bin/tunnel-agent serve # A\n",
	"/etc/sudoers.d/tunnel-agent":                  "tunnel ALL=(root) NOPASSWD: /usr/bin/systemctl restart revtunnel-client.service\n",
}

// rig is a machine in a temporary directory with a fake systemctl and visudo.
type rig struct {
	root   string
	u      *agent.Updater
	calls  []string
	onCall func(call string) error
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{root: t.TempDir()}
	for p, body := range machineA {
		writeFile(t, filepath.Join(r.root, p), body)
	}
	r.u = &agent.Updater{Root: r.root, Version: "A",
		LookPath: func(name string) (string, error) {
			switch name {
			case "systemctl":
				return "/usr/bin/systemctl", nil
			case "visudo":
				return "/usr/sbin/visudo", nil
			}
			return "", errors.New("not found")
		},
		Run: func(_ context.Context, name string, args ...string) (string, error) {
			if name == "/usr/sbin/visudo" {
				// The temporary name differs each time.
				args = args[:1]
			}
			call := strings.Join(append([]string{name}, args...), " ")
			r.calls = append(r.calls, call)
			if r.onCall != nil {
				if err := r.onCall(call); err != nil {
					return ">>> " + call + ": " + err.Error(), err
				}
			}
			return "", nil
		}}
	return r
}

func (r *rig) path(p string) string { return filepath.Join(r.root, p) }
func (r *rig) lib(p string) string  { return filepath.Join(r.root, agent.LibDir, p) }

func (r *rig) apply(t *testing.T, h agent.UpdateHeader, bundle []byte) error {
	t.Helper()
	line, _ := json.Marshal(h)
	return r.u.Apply(context.Background(), bytes.NewReader(append(append(line, '\n'), bundle...)))
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func assertMachineA(t *testing.T, r *rig) {
	t.Helper()
	for p, body := range machineA {
		assertFile(t, r.path(p), body)
	}
}

func assertNoTempFiles(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") || strings.Contains(e.Name(), "rollback-") {
				t.Errorf("temporary file left: %s", filepath.Join(d, e.Name()))
			}
		}
	}
}

func stateFile(t *testing.T, r *rig) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, r.lib("update-state"))), "\n") {
		k, v, _ := strings.Cut(line, "=")
		m[k] = v
	}
	return m
}

// TestApplyUpdateAndRollback installs bundle B over a machine bootstrapped
// with A, then runs the real rollback.sh as the timer would: A is back.
func TestApplyUpdateAndRollback(t *testing.T) {
	r := newRig(t)
	bundle := makeBundle(t, bundleEntries("B", "client 0.65"))
	r.onCall = func(call string) error {
		if call == "systemctl restart tunnelsvc-rollback.timer" {
			// Armed before anything is replaced, with A saved.
			assertFile(t, r.path("/usr/local/bin/tunnel-agent"), "agent A")
			assertFile(t, r.lib("previous/tunnel-agent"), "agent A")
			if _, err := os.Stat(r.lib("rollback.sh")); err != nil {
				t.Error("timer started before rollback.sh was written")
			}
		}
		return nil
	}
	if err := r.apply(t, agent.UpdateHeader{Version: "B", SHA256: sum(bundle), Size: int64(len(bundle))}, bundle); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/usr/sbin/visudo -cf",
		"systemctl daemon-reload",
		"systemctl restart tunnelsvc-rollback.timer",
		"systemctl daemon-reload",
		"systemctl restart revtunnel-client.service",
		"systemctl --no-block restart tunnel-agent.service",
	}
	if got := strings.Join(r.calls, "\n"); got != strings.Join(want, "\n") {
		t.Fatalf("commands:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	assertFile(t, r.path("/usr/local/bin/tunnel-agent"), "agent B")
	assertFile(t, r.path("/usr/local/bin/revtunnel-client"), "client 0.65")
	assertFile(t, r.path("/etc/sudoers.d/tunnel-agent"),
		"Defaults:tunnel !requiretty\ntunnel ALL=(root) NOPASSWD: /usr/bin/systemctl restart revtunnel-client.service\n")
	for p, mode := range map[string]os.FileMode{"/usr/local/bin/tunnel-agent": 0o755, "/etc/sudoers.d/tunnel-agent": 0o440,
		"/etc/systemd/system/tunnel-agent.service": 0o644} {
		if st, err := os.Stat(r.path(p)); err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want mode %v", p, st.Mode(), err, mode)
		}
	}
	assertFile(t, r.lib("bundle-version"), "B\n")
	assertFile(t, r.lib("previous/VERSION"), "A\n")
	assertFile(t, r.lib("previous/revtunnel-client"), "client 0.61")
	assertFile(t, r.lib("previous/sudoers-tunnel-agent"), machineA["/etc/sudoers.d/tunnel-agent"])
	if st := stateFile(t, r); st["state"] != "applying" || st["version"] != "B" {
		t.Fatalf("update-state %v", st)
	}
	for _, u := range []string{"tunnelsvc-rollback.timer", "tunnelsvc-rollback.service"} {
		if _, err := os.Stat(r.path("/etc/systemd/system/" + u)); err != nil {
			t.Fatalf("%s: %v", u, err)
		}
	}
	timer := readFile(t, r.path("/etc/systemd/system/tunnelsvc-rollback.timer"))
	if !strings.Contains(timer, "OnActiveSec=60s\n") || !strings.Contains(timer, "AccuracySec=1s\n") {
		t.Fatalf("timer:\n%s", timer)
	}
	assertNoTempFiles(t, r.path("/usr/local/bin"), r.path("/etc/sudoers.d"), r.path("/etc/systemd/system"), r.lib(""))

	script := r.lib("rollback.sh")
	if _, err := exec.LookPath("shellcheck"); err == nil {
		if out, err := exec.Command("shellcheck", "--severity=style", "-s", "sh", script).CombinedOutput(); err != nil {
			t.Errorf("shellcheck rollback.sh: %v\n%s", err, out)
		}
	}

	// The new agent never checked in: the timer runs rollback.sh, with
	// only a fake systemctl on PATH besides coreutils.
	bin := t.TempDir()
	log := filepath.Join(bin, "calls")
	writeFile(t, filepath.Join(bin, "systemctl"), "#!/bin/sh\necho \"$*\" >>"+log+"\n")
	os.Chmod(filepath.Join(bin, "systemctl"), 0o755)
	cmd := exec.Command("sh", script)
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rollback.sh: %v\n%s", err, out)
	}
	reason := "the new agent (B) did not check in within 60 s; bundle A was restored"
	if !strings.Contains(string(out), reason) {
		t.Fatalf("rollback.sh said %q", out)
	}
	assertMachineA(t, r)
	assertFile(t, r.lib("bundle-version"), "A\n")
	st := stateFile(t, r)
	if st["state"] != "rolled_back" || st["version"] != "B" || st["error"] != reason {
		t.Fatalf("update-state %v", st)
	}
	if at, err := time.Parse(time.RFC3339, st["at"]); err != nil || time.Since(at) > time.Minute {
		t.Fatalf("at=%q (%v)", st["at"], err)
	}
	if st, err := os.Stat(r.path("/etc/sudoers.d/tunnel-agent")); err != nil || st.Mode().Perm() != 0o440 {
		t.Fatalf("sudoers after rollback: %v %v", st.Mode(), err)
	}
	wantCalls := "stop tunnelsvc-rollback.timer\ndaemon-reload\nrestart revtunnel-client.service\nrestart tunnel-agent.service\n"
	assertFile(t, log, wantCalls)
	for _, u := range []string{"tunnelsvc-rollback.timer", "tunnelsvc-rollback.service"} {
		if _, err := os.Stat(r.path("/etc/systemd/system/" + u)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s is still there after the rollback: %v", u, err)
		}
	}
	assertNoTempFiles(t, r.path("/usr/local/bin"), r.path("/etc/sudoers.d"), r.path("/etc/systemd/system"), r.lib(""))

	// The agent of A, back, reports it.
	srv, _ := newUpdateServer(t, r.lib(""), "A")
	s := getStatus(t, srv)
	if s.BundleVersion != "A" || s.Update == nil || s.Update.State != "rolled_back" || s.Update.Error != reason {
		t.Fatalf("status after the rollback: %+v %+v", s, s.Update)
	}
}

// TestConfirmUpdate: the new agent confirms; the timer goes, the previous
// bundle stays. An unchanged client is not restarted.
func TestConfirmUpdate(t *testing.T) {
	r := newRig(t)
	bundle := makeBundle(t, bundleEntries("B", "client 0.61"))
	if err := r.apply(t, agent.UpdateHeader{Version: "B", SHA256: sum(bundle), Size: int64(len(bundle))}, bundle); err != nil {
		t.Fatal(err)
	}
	for _, c := range r.calls {
		if strings.Contains(c, "revtunnel-client") {
			t.Fatalf("the client did not change but was restarted: %q", r.calls)
		}
	}
	r.calls = nil
	r.u.Version = "B"
	if err := r.u.Confirm(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.calls, ","); got != "systemctl stop tunnelsvc-rollback.timer,systemctl daemon-reload" {
		t.Fatalf("commands %q", got)
	}
	for _, u := range []string{"tunnelsvc-rollback.timer", "tunnelsvc-rollback.service"} {
		if _, err := os.Stat(r.path("/etc/systemd/system/" + u)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s is still there: %v", u, err)
		}
	}
	if st := stateFile(t, r); st["state"] != "current" || st["version"] != "B" || st["error"] != "" {
		t.Fatalf("update-state %v", st)
	}
	assertFile(t, r.lib("previous/tunnel-agent"), "agent A")
	assertFile(t, r.lib("previous/VERSION"), "A\n")

	// The next update saves B as the previous bundle.
	bundle = makeBundle(t, bundleEntries("C", "client 0.61"))
	if err := r.apply(t, agent.UpdateHeader{Version: "C", SHA256: sum(bundle), Size: int64(len(bundle))}, bundle); err != nil {
		t.Fatal(err)
	}
	assertFile(t, r.lib("previous/VERSION"), "B\n")
	assertFile(t, r.lib("previous/tunnel-agent"), "agent B")
	assertFile(t, r.path("/usr/local/bin/tunnel-agent"), "agent C")
}

// TestApplyUpdateRefused: a bundle that is not exactly what was announced,
// or not exactly a bundle, changes nothing on the machine.
func TestApplyUpdateRefused(t *testing.T) {
	good := bundleEntries("B", "client 0.65")
	with := func(extra ...tarEntry) []tarEntry { return append(append([]tarEntry{}, good...), extra...) }
	cases := []struct {
		name    string
		entries []tarEntry
		header  func(h *agent.UpdateHeader)
		visudo  error
		want    string
	}{
		{name: "wrong SHA-256", header: func(h *agent.UpdateHeader) { h.SHA256 = strings.Repeat("0", 64) },
			want: "bundle refused: SHA-256 mismatch (expected " + strings.Repeat("0", 64) + ", got "},
		{name: "shorter than announced", header: func(h *agent.UpdateHeader) { h.Size += 10 }, want: "bundle refused: size mismatch (expected"},
		{name: "longer than announced", header: func(h *agent.UpdateHeader) { h.Size-- }, want: "bytes, got more); nothing was changed"},
		{name: "version differs", header: func(h *agent.UpdateHeader) { h.Version = "C" }, want: `its VERSION is "B", not the announced "C"`},
		{name: "path outside", entries: with(tarEntry{name: "../../etc/passwd", body: "x"}), want: `unexpected entry "../../etc/passwd"`},
		{name: "a path", entries: with(tarEntry{name: "usr/local/bin/x", body: "x"}), want: `unexpected entry "usr/local/bin/x"`},
		{name: "symlink", entries: append(append([]tarEntry{}, good[:1]...), append([]tarEntry{{name: "tunnel-agent", body: "/bin/sh", typ: tar.TypeSymlink}}, good[2:]...)...),
			want: `"tunnel-agent" is not a regular file`},
		{name: "duplicate", entries: with(tarEntry{name: "tunnel-agent", body: "evil"}), want: `"tunnel-agent" appears twice`},
		{name: "missing", entries: good[:5], want: `"sudoers-tunnel-agent" is missing`},
		{name: "visudo refuses", visudo: errors.New("exit status 1"), want: "visudo refused its sudo rules"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			r.onCall = func(call string) error {
				if strings.Contains(call, "visudo") {
					return c.visudo
				}
				return nil
			}
			entries := c.entries
			if entries == nil {
				entries = good
			}
			bundle := makeBundle(t, entries)
			h := agent.UpdateHeader{Version: "B", SHA256: sum(bundle), Size: int64(len(bundle))}
			if c.header != nil {
				c.header(&h)
			}
			err := r.apply(t, h, bundle)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasSuffix(err.Error(), "; nothing was changed") {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			assertMachineA(t, r)
			if _, err := os.Stat(r.lib("")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s was created: %v", r.lib(""), err)
			}
			for _, call := range r.calls {
				if strings.HasPrefix(call, "systemctl") {
					t.Fatalf("ran %q", call)
				}
			}
			assertNoTempFiles(t, r.path("/etc/sudoers.d"))
		})
	}
}

// TestApplyUpdateUndo: a failure after the first file was replaced puts the
// previous files back, disarms the rollback and says so.
func TestApplyUpdateUndo(t *testing.T) {
	r := newRig(t)
	reloads := 0
	r.onCall = func(call string) error {
		if call == "systemctl daemon-reload" {
			if reloads++; reloads == 2 {
				return errors.New("exit status 1")
			}
		}
		return nil
	}
	bundle := makeBundle(t, bundleEntries("B", "client 0.65"))
	err := r.apply(t, agent.UpdateHeader{Version: "B", SHA256: sum(bundle), Size: int64(len(bundle))}, bundle)
	if err == nil || !strings.Contains(err.Error(), "systemctl daemon-reload: >>> systemctl daemon-reload: exit status 1") ||
		!strings.Contains(err.Error(), "the previous files were put back") {
		t.Fatalf("got %v", err)
	}
	assertMachineA(t, r)
	assertFile(t, r.lib("bundle-version"), "A\n")
	if st := stateFile(t, r); st["state"] != "failed" || st["version"] != "B" || st["error"] != err.Error() {
		t.Fatalf("update-state %v", st)
	}
	if _, err := os.Stat(r.path("/etc/systemd/system/tunnelsvc-rollback.timer")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("rollback timer left: %v", err)
	}
	if !strings.Contains(strings.Join(r.calls, ","), "systemctl stop tunnelsvc-rollback.timer") {
		t.Fatalf("timer not stopped: %q", r.calls)
	}
}
