package api

import (
	"fmt"
	"strings"
	"testing"
)

// TestAuditRecordsDashboardChanges: machine, tunnel and token changes are
// in the audit log with the client's address and names, and the log
// filters by category or exact kind.
func TestAuditRecordsDashboardChanges(t *testing.T) {
	e := newMachinesEnv(t, wide)
	op := "192.0.2.44:5555"
	do := func(method, path, body string) map[string]any {
		return e.data(t, e.do(req{method: method, path: path, body: body, cookie: e.cookie, peer: op}), map[string]int{"POST": 200, "PATCH": 200, "DELETE": 200}[method])
	}
	tok := e.data(t, e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{"label":"garage"}`, cookie: e.cookie, peer: op}), 200)
	e.data(t, e.bootstrap(t, tok["token"].(string), "pi"), 200)
	do("PATCH", "/api/machines/1", `{"name":"garage-pi"}`)
	tn := e.data(t, e.do(req{method: "POST", path: "/api/tunnels", body: `{"machine_id":1,"name":"web","kind":"http","local_port":80,"subdomain":"wiki"}`, cookie: e.cookie, peer: op}), 201)
	do("PATCH", "/api/tunnels/"+fmt.Sprint(tn["id"]), `{"local_port":8080}`)
	do("DELETE", "/api/tunnels/"+fmt.Sprint(tn["id"]), "")
	tok2 := e.data(t, e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{}`, cookie: e.cookie, peer: op}), 200)
	do("DELETE", "/api/bootstrap/tokens/"+fmt.Sprint(tok2["id"]), "")
	do("DELETE", "/api/machines/1", "")

	type row struct{ kind, category, addr, detail string }
	rows := func(query string) []row {
		var out []row
		for _, x := range e.list(t, "/api/security/logs"+query) {
			m := x.(map[string]any)
			out = append(out, row{m["kind"].(string), m["category"].(string), m["client_addr"].(string), m["detail"].(string)})
		}
		return out
	}
	want := []row{
		{"MACHINE_DELETED", "machine", "192.0.2.44", `machine "garage-pi" deleted with its tunnels`},
		{"TOKEN_REVOKED", "token", "192.0.2.44", fmt.Sprintf("join token #%v revoked", tok2["id"])},
		{"TOKEN_CREATED", "token", "192.0.2.44", fmt.Sprintf("join token #%v created", tok2["id"])},
		{"TUNNEL_DELETED", "tunnel", "192.0.2.44", `http tunnel "web" of machine "garage-pi" deleted`},
		{"TUNNEL_UPDATED", "tunnel", "192.0.2.44", `tunnel "web" of machine "garage-pi" changed: local port 80 → 8080`},
		{"TUNNEL_CREATED", "tunnel", "192.0.2.44", `http tunnel "web" created on machine "garage-pi": local port 80, subdomain wiki`},
		{"MACHINE_RENAMED", "machine", "192.0.2.44", `machine "pi" renamed to "garage-pi"`},
		{"MACHINE_REGISTERED", "machine", "198.51.100.7", `machine "pi" (user pi) registered with tunnel port <port>`},
		{"TOKEN_CREATED", "token", "192.0.2.44", `join token "garage" created`},
	}
	got := rows("")
	// The newest entries are ours; below them the setup's own login rows.
	if len(got) < len(want) {
		t.Fatalf("audit log = %v", got)
	}
	for i, w := range want {
		g := got[i]
		if w.kind == "MACHINE_REGISTERED" {
			if g.kind != w.kind || g.addr != w.addr || !strings.HasPrefix(g.detail, `machine "pi" (user pi) registered with tunnel port `) {
				t.Errorf("entry %d = %+v, want a registration from %s", i, g, w.addr)
			}
			continue
		}
		if g != w {
			t.Errorf("entry %d = %+v\n           want %+v", i, g, w)
		}
	}
	for _, r := range rows("?kind=machine") {
		if r.category != "machine" {
			t.Fatalf("?kind=machine listed %+v", r)
		}
	}
	if n := len(rows("?kind=machine")); n != 3 {
		t.Fatalf("?kind=machine: %d rows, want 3", n)
	}
	if r := rows("?kind=tunnel_updated"); len(r) != 1 || r[0].kind != "TUNNEL_UPDATED" {
		t.Fatalf("?kind=tunnel_updated = %v", r)
	}
	for _, r := range rows("?kind=auth") {
		if r.category != "auth" {
			t.Fatalf("?kind=auth listed %+v", r)
		}
	}
	if len(rows("?kind=auth")) == 0 {
		t.Fatal("?kind=auth lists nothing: the setup's login is an auth event")
	}
	wantError(t, e.do(req{method: "GET", path: "/api/security/logs?kind=no%20such", cookie: e.cookie}), 400, "unknown kind: no such")
}

// TestSSHKeyMachineCount: each machine records the key it was given; the
// key list counts them.
func TestSSHKeyMachineCount(t *testing.T) {
	e := newMachinesEnv(t, wide)
	e.svc.Keys = e.sshkeys
	e.data(t, e.bootstrap(t, e.token(t), "a"), 200)
	e.data(t, e.bootstrap(t, e.token(t), "b"), 200)
	second := e.data(t, e.do(req{method: "POST", path: "/api/local/ssh-keys/generate", body: `{"name":"new","set_default":true}`, cookie: e.cookie}), 200)
	e.data(t, e.bootstrap(t, e.token(t), "c"), 200)
	counts := map[string]float64{}
	for _, k := range e.list(t, "/api/local/ssh-keys") {
		m := k.(map[string]any)
		counts[m["name"].(string)] = m["machine_count"].(float64)
	}
	if counts["Default key"] != 2 || counts["new"] != 1 {
		t.Fatalf("machine counts = %v", counts)
	}
	if m := e.data(t, e.do(req{method: "GET", path: "/api/machines/3", cookie: e.cookie}), 200); m["ssh_key_id"] != second["id"] {
		t.Fatalf("machine 3 key = %v, want %v", m["ssh_key_id"], second["id"])
	}
	// Deleting a machine lowers the count.
	e.data(t, e.do(req{method: "DELETE", path: "/api/machines/1", cookie: e.cookie}), 200)
	for _, k := range e.list(t, "/api/local/ssh-keys") {
		if m := k.(map[string]any); m["name"] == "Default key" && m["machine_count"] != 1.0 {
			t.Fatalf("after delete: %v", m)
		}
	}
}
