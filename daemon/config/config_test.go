package config

import (
	"flag"
	"net/netip"
	"testing"
)

func parse(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	c := Default()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	nets := Register(fs, &c)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	return c, c.Finish(*nets)
}

func TestEnvThenFlag(t *testing.T) {
	t.Setenv("TUNNELSVC_DATA_DIR", "/tmp/from-env")
	t.Setenv("TUNNELSVC_LISTEN", "127.0.0.1:1")
	c, err := parse(t, "--listen", "127.0.0.1:2")
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/tmp/from-env" || c.Listen != "127.0.0.1:2" {
		t.Fatalf("data=%q listen=%q", c.DataDir, c.Listen)
	}
}

func TestLocalNets(t *testing.T) {
	c, err := parse(t, "--local-nets", "127.0.0.1, ::1/128")
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{"127.0.0.1": true, "127.0.0.2": false, "::1": true, "::ffff:127.0.0.1": true, "203.0.113.9": false} {
		if got := c.IsLocal(netip.MustParseAddr(addr)); got != want {
			t.Errorf("IsLocal(%s) = %v, want %v", addr, got, want)
		}
	}
	if _, err := parse(t, "--local-nets", "nonsense"); err == nil {
		t.Fatal("bad --local-nets accepted")
	}
	if _, err := parse(t, "--log-level", "loud"); err == nil {
		t.Fatal("bad --log-level accepted")
	}
}

func TestSystemPath(t *testing.T) {
	c, err := parse(t, "--system-root", "/tmp/root")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.SystemPath("/etc/revtunnel/server.toml"); got != "/tmp/root/etc/revtunnel/server.toml" {
		t.Fatal(got)
	}
}

func TestTunnelFlags(t *testing.T) {
	c, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	if c.FRPSPort != 7000 || c.TunnelPortLo != 20000 || c.TunnelPortHi != 29999 || c.PluginListen != "127.0.0.1:7381" {
		t.Fatalf("defaults: %+v", c)
	}
	c, err = parse(t, "--tunnel-ports", "40000-40099", "--frps-port", "7100")
	if err != nil || c.TunnelPortLo != 40000 || c.TunnelPortHi != 40099 || c.FRPSPort != 7100 {
		t.Fatalf("%+v %v", c, err)
	}
	for _, bad := range [][]string{
		{"--tunnel-ports", "30000"}, {"--tunnel-ports", "3-2"}, {"--tunnel-ports", "1-70000"},
		{"--frps-port", "x"}, {"--frps-port", "25000"}, {"--frps-plugin-listen", "0.0.0.0:7381"},
	} {
		if _, err := parse(t, bad...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
