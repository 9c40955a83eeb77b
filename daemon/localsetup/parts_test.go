package localsetup

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
)

func packages(ms []MissingPart) []string {
	out := []string{}
	for _, m := range ms {
		if m.NeededFor == "" {
			return nil
		}
		out = append(out, m.Package)
	}
	return out
}

// TestMissingParts: the status names each recommended package whose
// command is absent, against the real commands of this machine.
func TestMissingParts(t *testing.T) {
	ctx := context.Background()
	real := map[string]string{}
	for _, c := range []string{"caddy", "nft", "fail2ban-client", "python3"} {
		p, err := exec.LookPath(c)
		if err != nil {
			t.Fatalf("%s is missing (scripts/install-deps.sh installs it)", c)
		}
		real[c] = p
	}
	// The python3 whose modules dpkg installs (and fail2ban runs on), not
	// another one first on this PATH (a pyenv shim, say), which cannot
	// import what python3-systemd installs.
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		real["python3"] = "/usr/bin/python3"
	}
	// A PATH with only the given commands in it.
	only := func(cmds ...string) string {
		dir := t.TempDir()
		for _, c := range cmds {
			if err := os.Symlink(real[c], filepath.Join(dir, c)); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	s := &Service{Run: cmdrun.Exec{}}

	s.ToolPath = only()
	if got := packages(s.MissingParts(ctx)); !reflect.DeepEqual(got, []string{"caddy", "nftables", "fail2ban"}) {
		t.Fatalf("nothing installed: missing %v", got)
	}
	s.ToolPath = only("caddy")
	if got := packages(s.MissingParts(ctx)); !reflect.DeepEqual(got, []string{"nftables", "fail2ban"}) {
		t.Fatalf("only caddy: missing %v", got)
	}
	s.ToolPath = only("caddy", "nft", "fail2ban-client")
	if got := packages(s.MissingParts(ctx)); !reflect.DeepEqual(got, []string{"python3-systemd"}) {
		t.Fatalf("fail2ban without python3: missing %v", got)
	}

	// Everything: python3-systemd is reported exactly when dpkg says it is
	// not installed.
	s.ToolPath = only("caddy", "nft", "fail2ban-client", "python3")
	want := []string{}
	if err := exec.Command("dpkg-query", "-W", "-f", "${db:Status-Status}", "python3-systemd").Run(); err != nil {
		want = []string{"python3-systemd"}
	} else if out, _ := exec.Command("dpkg-query", "-W", "-f", "${db:Status-Status}", "python3-systemd").Output(); string(out) != "installed" {
		want = []string{"python3-systemd"}
	}
	if got := packages(s.MissingParts(ctx)); !reflect.DeepEqual(got, want) {
		t.Fatalf("all commands present: missing %v, want %v", got, want)
	}
}

// TestMissingPartsFollowTheBanTool: with the ban tool's own check wired,
// the overview lists fail2ban and python3-systemd as the Ban tool page
// does, whatever is on the PATH.
func TestMissingPartsFollowTheBanTool(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, c := range []string{"caddy", "nft", "fail2ban-client"} {
		os.WriteFile(filepath.Join(dir, c), []byte("#!/bin/sh\n"), 0o755)
	}
	s := &Service{Run: cmdrun.Exec{}, ToolPath: dir}
	for _, c := range []struct {
		installed, journal bool
		want               []string
	}{
		{false, false, []string{"fail2ban"}},
		{true, false, []string{"python3-systemd"}},
		{true, true, []string{}},
	} {
		s.BanTool = func(context.Context) (bool, bool) { return c.installed, c.journal }
		if got := packages(s.MissingParts(ctx)); !reflect.DeepEqual(got, c.want) {
			t.Fatalf("ban tool installed %v, journal %v: missing %v, want %v", c.installed, c.journal, got, c.want)
		}
	}
}
