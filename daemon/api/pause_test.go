package api

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
)

// TestPauseResumeTunnel: PATCH {"paused": true} closes a tunnel without
// deleting it: it shows paused, its proxy leaves the machine's client
// config and its site the Caddyfile, and it cannot be probed; {"paused":
// false} puts everything back. Both are audited.
func TestPauseResumeTunnel(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		if err := (localsetup.Settings{Store: e.st}).SetDomain(t.Context(), "example.com"); err != nil {
			t.Fatal(err)
		}
		e.data(t, e.bootstrap(t, e.token(t), "pi"), 200)
		web := e.data(t, e.do(req{method: "POST", path: "/api/tunnels", cookie: e.cookie,
			body: `{"machine_id":1,"name":"web","kind":"http","local_port":80,"subdomain":"wiki"}`}), 201)
		db := e.data(t, e.do(req{method: "POST", path: "/api/tunnels", cookie: e.cookie,
			body: `{"machine_id":1,"name":"db","kind":"tcp","local_port":5432}`}), 201)
		if web["paused"] != false || web["status"] == "paused" {
			t.Fatalf("a new tunnel: %v", web)
		}
		_, last := auditAfter(t, e.testEnv, e.cookie, 0)
		text := func(path string) string {
			t.Helper()
			r := e.do(req{method: "GET", path: path, cookie: e.cookie})
			if r.Code != 200 {
				t.Fatalf("GET %s: %d %s", path, r.Code, r.Body)
			}
			return r.Body.String()
		}
		proxy := func(tn map[string]any) string {
			return "name = '" + frpconf.TunnelProxy(int64(tn["id"].(float64))) + "'"
		}
		open := func() {
			t.Helper()
			cfg, caddy := text("/api/machines/1/revtunnel-client"), text("/api/debug/webproxyfile")
			if !strings.Contains(cfg, proxy(web)) || !strings.Contains(cfg, proxy(db)) || strings.Contains(cfg, "Paused") {
				t.Fatalf("client config of open tunnels:\n%s", cfg)
			}
			if !strings.Contains(caddy, "wiki.example.com {") || strings.Contains(caddy, "Paused") {
				t.Fatalf("Caddyfile of an open tunnel:\n%s", caddy)
			}
		}
		open()

		for _, tn := range []map[string]any{web, db} {
			path := fmt.Sprintf("/api/tunnels/%v", tn["id"])
			got := e.data(t, e.do(req{method: "PATCH", path: path, body: `{"paused":true}`, cookie: e.cookie}), 200)
			if got["paused"] != true || got["status"] != "paused" || got["status_reason"] != machines.PausedReason {
				t.Fatalf("paused tunnel: %v", got)
			}
		}
		for _, tn := range e.list(t, "/api/tunnels") {
			if m := tn.(map[string]any); m["status"] != "paused" || m["paused"] != true {
				t.Fatalf("tunnel list: %v", m)
			}
		}
		cfg, caddy := text("/api/machines/1/revtunnel-client"), text("/api/debug/webproxyfile")
		if strings.Contains(cfg, proxy(web)) || strings.Contains(cfg, proxy(db)) ||
			!strings.Contains(cfg, fmt.Sprintf("# Paused in the dashboard, left out until resumed: tunnel-%v, tunnel-%v", web["id"], db["id"])) {
			t.Fatalf("client config of paused tunnels:\n%s", cfg)
		}
		if strings.Contains(caddy, "wiki.example.com {") || !strings.Contains(caddy, "# Paused in the dashboard, left out until resumed: wiki.example.com") {
			t.Fatalf("Caddyfile of a paused tunnel:\n%s", caddy)
		}
		wantError(t, e.do(req{method: "POST", path: fmt.Sprintf("/api/tunnels/%v/probe", web["id"]), cookie: e.cookie}), 400,
			"the tunnel is paused: resume it to probe it")
		// Pausing again changes nothing and records nothing.
		e.data(t, e.do(req{method: "PATCH", path: fmt.Sprintf("/api/tunnels/%v", web["id"]), body: `{"paused":true}`, cookie: e.cookie}), 200)

		for _, tn := range []map[string]any{web, db} {
			got := e.data(t, e.do(req{method: "PATCH", path: fmt.Sprintf("/api/tunnels/%v", tn["id"]), body: `{"paused":false}`, cookie: e.cookie}), 200)
			if got["paused"] != false || got["status"] == "paused" {
				t.Fatalf("resumed tunnel: %v", got)
			}
		}
		open()

		rows, _ := auditAfter(t, e.testEnv, e.cookie, last)
		want := []auditRow{
			{"TUNNEL_PAUSED", `http tunnel "web" of machine "pi" paused`},
			{"TUNNEL_PAUSED", `tcp tunnel "db" of machine "pi" paused`},
			{"TUNNEL_RESUMED", `http tunnel "web" of machine "pi" resumed`},
			{"TUNNEL_RESUMED", `tcp tunnel "db" of machine "pi" resumed`},
		}
		if !slices.Equal(rows, want) {
			t.Fatalf("audit rows\n got %q\nwant %q", rows, want)
		}
		var kinds []string
		for _, ev := range e.list(t, "/api/local/activity?machine_id=1") {
			kinds = append(kinds, ev.(map[string]any)["kind"].(string))
		}
		if n := strings.Count(strings.Join(kinds, " "), "paused"); n != 2 {
			t.Fatalf("activity kinds %v: %d paused, want 2", kinds, n)
		}
	})
}
