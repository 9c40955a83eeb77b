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

// RenderAll renders what the daemon writes for n tunnels spread over n/10
// machines: the Caddyfile (every tunnel an HTTP site), the svc nftables
// ruleset (every tunnel port private) and every machine's frpc config.
func RenderAll(n int) error {
	machines := n / 10
	if machines < 1 {
		machines = 1
	}
	sites := make([]webproxy.HTTPTunnel, n)
	ports := make([]int, n)
	perMachine := make([][]store.Tunnel, machines)
	for i := 0; i < n; i++ {
		port := 20000 + i%10000
		sites[i] = webproxy.HTTPTunnel{Subdomain: fmt.Sprintf("app-%d", i), Port: port}
		ports[i] = port
		m := i % machines
		perMachine[m] = append(perMachine[m], store.Tunnel{ID: int64(i + 1), MachineID: int64(m + 1), Name: fmt.Sprintf("t%d", i), Kind: "tcp", LocalPort: 8080, RemotePort: port})
	}
	if _, err := webproxy.Render(webproxy.Input{Domain: "example.com", Dashboard: "127.0.0.1:7380", Tunnels: sites}); err != nil {
		return err
	}
	if _, err := firewall.Render(firewall.Ports{ControlPort: 7000, PrivatePorts: ports, DashboardPort: 7380}); err != nil {
		return err
	}
	for m := 0; m < machines; m++ {
		if _, err := frpconf.ClientConfig(frpconf.ClientParams{
			ServerAddr: "vps.example.com", ServerPort: 7000, MachineID: int64(m + 1), Secret: "s3cret",
			SSHLocalPort: 22, TunnelPort: 30000 + m, AgentLocalPort: 7401, AgentPort: 31000 + m,
			Tunnels: perMachine[m],
		}); err != nil {
			return err
		}
	}
	return nil
}

// Render times RenderAll(n) with the testing package's benchmark loop.
func Render(n int) Row {
	row := Row{Figure: fmt.Sprintf("render the Caddyfile, nftables ruleset and frpc configs for %d tunnels", n), Goal: "< 100 ms", Baseline: "none (absolute)"}
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
