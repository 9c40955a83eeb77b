package api

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/firewall"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// TestFirewallPlan: before choosing svc the operator sees which ports it
// leaves open and what could lock them out.
func TestFirewallPlan(t *testing.T) {
	e := newEnv(t, func(o *Options, st *store.Store) {
		o.Firewall = firewall.New(firewall.Options{Store: st, RulesetPath: t.TempDir() + "/fw.nft",
			Ports: func(context.Context) (firewall.Ports, error) {
				return firewall.Ports{ControlPort: 7000, PrivatePorts: []int{20001, 20002}, PublicTCPPorts: []int{20005},
					DashboardPort: 7380, DashboardPrivate: true, BindIP: "203.0.113.5"}, nil
			}})
	})
	cookie := e.setup()
	d := dataOf(t, e.do(req{method: "GET", path: "/api/local/firewall/plan", cookie: cookie}))
	got := fmt.Sprintln(d["open_tcp"], d["open_udp"], d["public_tunnel_tcp"], d["private_tcp"], d["bind_ip"], d["dashboard_port"], d["dashboard_private"])
	if want := "[22 80 443 7000] [443] [20005] [7380 20001 20002] 203.0.113.5 7380 true\n"; got != want {
		t.Fatalf("plan = %s, want %s", got, want)
	}
	var ws []string
	for _, w := range d["warnings"].([]any) {
		ws = append(ws, w.(string))
	}
	all := strings.Join(ws, "\n")
	for _, want := range []string{
		"only TCP 22, 80, 443, 7000 stay open to the outside",
		"SSH is allowed on port 22 only: if sshd listens on another port you will lose SSH access to this server.",
		"The dashboard port 7380 is closed to the outside",
		"Public tcp tunnels (20005) are accepted only on 203.0.113.5.",
		"nft delete table inet tunnelsvc",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings lack %q:\n%s", want, all)
		}
	}
	wantError(t, e.do(req{method: "GET", path: "/api/local/firewall/plan"}), 401, "authentication required")
}
