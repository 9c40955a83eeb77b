package api

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// TestFirewallPlan: before choosing svc the operator sees which ports it
// leaves open and what could lock them out.
func TestFirewallPlan(t *testing.T) {
	// The dashboard on 7380, made private; a machine (its tunnel and agent
	// ports are private) with a public tcp tunnel; a bind address.
	dir := t.TempDir()
	e := newEnvDeps(t, newTestDB(t, sqliteEngine, dir), dir, nil,
		app.Deps{Units: &testutil.MemoryUnits{}, Dashboard: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7380}})
	cookie := e.setup()
	me := &machinesEnv{testEnv: e, svc: e.app.Machines, cookie: cookie}
	me.data(t, me.bootstrap(t, me.token(t), "nas"), 200)
	m := me.data(t, me.do(req{method: "GET", path: "/api/machines/1", cookie: cookie}), 200)
	game := me.data(t, me.do(req{method: "POST", path: "/api/tunnels", cookie: cookie,
		body: `{"machine_id":1,"name":"game","kind":"tcp","local_port":25565,"public":true}`}), 201)
	for _, put := range []struct{ path, body string }{
		{"/api/local/server-ports", `{"dashboard_private":true}`}, {"/api/local/bind-ip", `{"bind_ip":"203.0.113.5"}`},
	} {
		if r := e.do(req{method: "PUT", path: put.path, body: put.body, cookie: cookie}); r.Code != 200 {
			t.Fatalf("%s: %d %s", put.path, r.Code, r.Body)
		}
	}
	private := []int{7380, int(m["tunnel_port"].(float64)), int(m["agent_port"].(float64))}
	slices.Sort(private)
	d := dataOf(t, e.do(req{method: "GET", path: "/api/local/firewall/plan", cookie: cookie}))
	got := fmt.Sprintln(d["open_tcp"], d["open_udp"], d["public_tunnel_tcp"], d["private_tcp"], d["bind_ip"], d["dashboard_port"], d["dashboard_private"])
	if want := fmt.Sprintln("[22 80 443 7000] [443]", fmt.Sprintf("[%v]", game["remote_port"]), fmt.Sprint(private), "203.0.113.5 7380 true"); got != want {
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
		fmt.Sprintf("Public tcp tunnels (%v) are accepted only on 203.0.113.5.", game["remote_port"]),
		"nft delete table inet tunnelsvc",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings lack %q:\n%s", want, all)
		}
	}
	wantError(t, e.do(req{method: "GET", path: "/api/local/firewall/plan"}), 401, "authentication required")
}
