package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExportApplyThroughLocalSocket: as root on the box, export and apply
// reach the daemon through its local socket with no token, as the
// operator runs them; another user cannot open the socket; and without a
// socket or a URL the commands say what to set.
func TestExportApplyThroughLocalSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the local socket answers root only")
	}
	d := startDaemon(t)
	sock := filepath.Join(d.dataDir, "api.sock")
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %s: %v %v", sock, fi.Mode(), err)
	}
	run := func(env []string, stdin string, args ...string) (string, error) {
		cmd := exec.Command(binary(t), args...)
		cmd.Env = append(os.Environ(), "TUNNELSVC_URL=", "TUNNELSVC_LOCAL_SOCKET="+sock)
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(nil, "", "export")
	if err != nil || !strings.Contains(out, "version: 1\n") || !strings.Contains(out, "tunnels: []\n") {
		t.Fatalf("export: %v\n%s", err, out)
	}
	file := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run(nil, "", "apply", "-f", file); err != nil || out != "no changes\n" {
		t.Fatalf("apply of the export: %v\n%s", err, out)
	}
	bad := "version: 1\ntunnels:\n  - {name: web, machine: nas, kind: http, port: 80, subdomain: web}\n"
	out, err = run(nil, bad, "apply", "-f", "-", "--dry-run")
	if err == nil || !strings.Contains(out, `tunnelsvc: apply: -: line 3 (tunnels[0]): machine "nas" has not joined this cluster (400)`) {
		t.Fatalf("apply of a file naming a machine that has not joined: %v\n%s", err, out)
	}
	// Another user: the socket's mode keeps it out.
	if _, err := exec.LookPath("setpriv"); err == nil {
		cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", binary(t), "export")
		cmd.Env = append(os.Environ(), "TUNNELSVC_URL=", "TUNNELSVC_LOCAL_SOCKET="+sock)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "permission denied") {
			t.Fatalf("export as nobody: %v\n%s", err, out)
		}
	}
	out, err = run([]string{"TUNNELSVC_LOCAL_SOCKET=" + filepath.Join(t.TempDir(), "none.sock")}, "", "export")
	if err == nil || !strings.Contains(out, "run this as root on the edge, or set TUNNELSVC_URL and TUNNELSVC_TOKEN") {
		t.Fatalf("no socket: %v\n%s", err, out)
	}
	out, err = run([]string{"TUNNELSVC_URL=" + d.base, "TUNNELSVC_TOKEN="}, "", "export")
	if err == nil || !strings.Contains(out, "TUNNELSVC_TOKEN is not") {
		t.Fatalf("a URL without a token: %v\n%s", err, out)
	}
	out, err = run([]string{"TUNNELSVC_URL=" + d.base, "TUNNELSVC_TOKEN=tsvc_wrong"}, "", "export")
	if err == nil || !strings.Contains(out, "(401)") {
		t.Fatalf("a wrong token: %v\n%s", err, out)
	}

	// From anywhere: an API token of scope write, made as docs/automation.md
	// says (the dashboard's Settings → API tokens is this route).
	c := &http.Client{Timeout: 10 * time.Second}
	r := call(t, c, "POST", d.base+"/api/auth/setup", `{"password":"`+password+`"}`, nil)
	session := map[string]string{"Cookie": strings.Split(r.header.Get("Set-Cookie"), ";")[0]}
	r = call(t, c, "POST", d.base+"/api/tokens", `{"name":"ci","scope":"write"}`, session)
	token, _ := data(r)["token"].(string)
	if r.status != 201 || token == "" {
		t.Fatalf("token: %d %v", r.status, r.body)
	}
	viaToken := []string{"TUNNELSVC_URL=" + d.base, "TUNNELSVC_TOKEN=" + token, "TUNNELSVC_LOCAL_SOCKET=/nonexistent"}
	if out, err := run(viaToken, "", "export"); err != nil || !strings.Contains(out, "version: 1\n") {
		t.Fatalf("export with a token: %v\n%s", err, out)
	}
	if out, err := run(viaToken, "", "apply", "-f", file, "--dry-run"); err != nil || out != "no changes\n" {
		t.Fatalf("apply with a token: %v\n%s", err, out)
	}
}
