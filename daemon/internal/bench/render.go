package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/firewall"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

// RenderAll renders what the VPS's tools read for n tunnels: the frps
// config, the Caddyfile (every tunnel an HTTP site) and the svc nftables
// ruleset (every tunnel port private). Machines' frpc configs are rendered
// one machine at a time, on that machine's change, and are not part of it.
func RenderAll(n int) error {
	sites := make([]webproxy.HTTPTunnel, n)
	ports := make([]int, n)
	for i := 0; i < n; i++ {
		port := 20000 + i%10000
		sites[i] = webproxy.HTTPTunnel{Subdomain: fmt.Sprintf("app-%d", i), Port: port}
		ports[i] = port
	}
	if _, err := frpconf.ServerConfig(frpconf.ServerParams{BindPort: 7000,
		PluginAddr: "127.0.0.1:7381", Ports: store.PortRange{Lo: 20000, Hi: 29999},
		CertFile: "/etc/revtunnel/server.crt", KeyFile: "/etc/revtunnel/server.key"}, ""); err != nil {
		return err
	}
	if _, err := webproxy.Render(webproxy.Input{Domain: "example.com", Dashboard: "127.0.0.1:7380", Tunnels: sites}); err != nil {
		return err
	}
	if _, err := firewall.Render(firewall.Ports{ControlPort: 7000, PrivatePorts: ports, DashboardPort: 7380}); err != nil {
		return err
	}
	return nil
}

// Render times RenderAll(n) with the testing package's benchmark loop.
func Render(n int) Row {
	row := Row{Figure: fmt.Sprintf("render the frps config, Caddyfile and nftables ruleset for %d tunnels", n), Goal: "< 100 ms", Baseline: "none (absolute)"}
	if err := RenderAll(n); err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	r := testing.Benchmark(func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			RenderAll(n)
		}
	})
	per := time.Duration(r.NsPerOp())
	row.Measured = fmt.Sprintf("%s per render (%d runs, %d allocs)", per.Round(10*time.Microsecond), r.N, r.AllocsPerOp())
	row.Value = float64(per) / float64(time.Millisecond)
	row.Met = per < 100*time.Millisecond
	return row
}
