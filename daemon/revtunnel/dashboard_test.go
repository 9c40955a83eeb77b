package revtunnel_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
)

// frps's dashboard API (the traffic collector's source) is on loopback
// with a password, or not at all.
func TestServerConfigDashboard(t *testing.T) {
	p := serverParams
	p.Dashboard = &frpconf.Dashboard{Addr: "127.0.0.1", Port: 7383, User: frpconf.DashboardUser, Password: "generated-password"}
	got, err := frpconf.ServerConfig(p, "")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "server-dashboard.toml", got)
	if err := revtunnel.Verify(context.Background(), frps, got); err != nil {
		t.Fatalf("frps refuses the rendered config: %v", err)
	}
	for _, bad := range []frpconf.Dashboard{
		{Addr: "0.0.0.0", Port: 7383, Password: "x"},
		{Addr: "192.0.2.1", Port: 7383, Password: "x"},
		{Addr: "127.0.0.1", Port: 7383},
		{Addr: "127.0.0.1", Port: 0, Password: "x"},
	} {
		p.Dashboard = &bad
		if _, err := frpconf.ServerConfig(p, ""); err == nil || !strings.Contains(err.Error(), "loopback address with a password") {
			t.Errorf("dashboard %+v: %v, want a refusal", bad, err)
		}
	}
}
