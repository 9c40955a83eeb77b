package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
)

// TestBindIPKeepsTunnelListenersOnLoopback drives PUT bind-ip's service
// with the daemon's own wiring: with bind_ip set, server.toml still binds
// tunnel listeners on 127.0.0.1 (before, bind_ip became frps's
// proxyBindAddr), the public tcp tunnel is published on bind_ip, and an
// IPv6 bind_ip while a public tunnel exists is the operator's error (a 400
// in the API) that leaves the old value in place. nft and sysctl run in a
// network namespace the test made.
func TestBindIPKeepsTunnelListenersOnLoopback(t *testing.T) {
	for tool, pkg := range map[string]string{"nft": "nftables", "ip": "iproute2", "sysctl": "procps"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/install-deps.sh installs %s)", tool, pkg)
		}
	}
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root for its network namespace (make test runs as root)")
	}
	ns := fmt.Sprintf("tsvcapp-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })

	ctx := context.Background()
	frps, _ := testutil.FRP()
	a := testApp(t, filepath.Dir(frps), Deps{HostTools: cmdrun.Exec{Prefix: []string{"ip", "netns", "exec", ns}}, Units: &testutil.MemoryUnits{}})
	cfg := a.Config

	reg := bootstrapNAS(t, a)
	kind, name, port, public := "tcp", "game", 25565, true
	tun, err := a.Machines.CreateTunnel(ctx, machines.TunnelInput{MachineID: &reg.MachineID, Name: &name, Kind: &kind, LocalPort: &port, Public: &public})
	if err != nil {
		t.Fatal(err)
	}

	if ip, err := a.Setup.SetBindIP(ctx, "192.0.2.10"); err != nil || ip != "192.0.2.10" {
		t.Fatalf("set bind_ip: %q %v", ip, err)
	}
	server, err := os.ReadFile(cfg.SystemPath(revtunnel.ServerConfigPath))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(server), "proxyBindAddr = '127.0.0.1'") || strings.Contains(string(server), "192.0.2.10") {
		t.Fatalf("server.toml with bind_ip set:\n%s", server)
	}
	published, _ := os.ReadFile(cfg.SystemPath(PublishRulesetPath))
	if !strings.Contains(string(published), fmt.Sprintf("ip daddr 192.0.2.10 tcp dport { %d } dnat to 127.0.0.1", tun.RemotePort)) {
		t.Fatalf("public tunnel not published on bind_ip:\n%s", published)
	}
	if out, _ := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "ip", "tunnelsvc_publish").CombinedOutput(); !strings.Contains(string(out), "192.0.2.10") {
		t.Fatalf("table not loaded:\n%s", out)
	}

	_, err = a.Setup.SetBindIP(ctx, "2001:db8::1")
	var in localsetup.InputError
	if !errors.As(err, &in) || !strings.Contains(err.Error(), "IPv4 only") {
		t.Fatalf("IPv6 bind_ip with a public tunnel: %v, want an input error", err)
	}
	if ip, _ := a.Setup.Settings.BindIP(ctx); ip != "192.0.2.10" {
		t.Fatalf("bind_ip after the refusal: %q", ip)
	}
}
