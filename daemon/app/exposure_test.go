package app

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// TestSSHCommandFollowsSettingsAtOnce: the SSH command the dashboard shows
// for a machine is worked out once between writes, yet follows the server
// host, the bind address and the firewall mode from the very next list
// after each changes, whether the daemon changed them or an admin command
// did through its own handle on the database.
func TestSSHCommandFollowsSettingsAtOnce(t *testing.T) {
	ctx := context.Background()
	frps, _ := testutil.FRP()
	a := testApp(t, filepath.Dir(frps))
	reg := bootstrapNAS(t, a)
	ms, err := a.Machines.Machines(ctx, "asked.example.com")
	if err != nil {
		t.Fatal(err)
	}
	port := ms[0].TunnelPort
	want := func(what, cmd string) {
		t.Helper()
		for i := 0; i < 2; i++ { // the first list works it out, the second reuses it
			ms, err := a.Machines.Machines(ctx, "asked.example.com")
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != 1 || ms[0].ID != reg.MachineID || ms[0].SSHCommand != cmd {
				t.Fatalf("%s: SSH command %q, want %q", what, ms[0].SSHCommand, cmd)
			}
		}
	}
	jump := func(host string) string { return "ssh -J root@" + host + " -p " + itoa(port) + " pi@127.0.0.1" }
	want("no server host", jump("asked.example.com"))

	here := localsetup.Settings{Store: a.Store}
	if err := here.SaveVPS(ctx, localsetup.VPS{Domain: "example.com", ServerHost: "a.example.com"}); err != nil {
		t.Fatal(err)
	}
	want("installed", jump("a.example.com"))

	other, err := store.Open(ctx, a.Config.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	there := localsetup.Settings{Store: other}
	if err := there.SaveVPS(ctx, localsetup.VPS{Domain: "example.com", ServerHost: "b.example.com"}); err != nil {
		t.Fatal(err)
	}
	want("server host changed by another handle", jump("b.example.com"))
	if err := there.SetBindIP(ctx, "192.0.2.10"); err != nil {
		t.Fatal(err)
	}
	want("bind address outside", "ssh -p "+itoa(port)+" pi@b.example.com")
	if err := here.SetFirewallMode(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	want("firewall closes the port", jump("b.example.com"))
}

func itoa(n int) string { return fmt.Sprint(n) }
