package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
)

// TestMachineNamesUnique: a name another machine has (in any ASCII case)
// answers 409 at registration and at rename, and changes nothing; the
// refused registration does not spend its token.
func TestMachineNamesUnique(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		e.data(t, e.bootstrap(t, e.token(t), "pi"), 200)
		tok := e.token(t)
		wantError(t, e.bootstrap(t, tok, "PI"), 409, "machine name already in use")
		if ms := e.list(t, "/api/machines"); len(ms) != 1 {
			t.Fatalf("a refused registration left a machine: %v", ms)
		}
		e.data(t, e.bootstrap(t, tok, "kitchen"), 200)
		ms := e.list(t, "/api/machines")
		id := fmt.Sprint(ms[1].(map[string]any)["id"])
		wantError(t, e.do(req{method: "PATCH", path: "/api/machines/" + id, body: `{"name":" pi "}`, cookie: e.cookie}), 409, "machine name already in use")
		if d := e.data(t, e.do(req{method: "GET", path: "/api/machines/" + id, cookie: e.cookie}), 200); d["name"] != "kitchen" {
			t.Fatalf("refused rename changed the machine: %v", d)
		}
		// Renaming to its own name, or its own name in another case, is fine.
		if d := e.data(t, e.do(req{method: "PATCH", path: "/api/machines/" + id, body: `{"name":"Kitchen"}`, cookie: e.cookie}), 200); d["name"] != "Kitchen" {
			t.Fatalf("renamed = %v", d)
		}
	})
}

// TestMachineDetail: why a machine is pending or offline, and the SSH
// command that reaches it.
func TestMachineDetail(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		e.data(t, e.bootstrap(t, e.token(t), "pi"), 200)
		get := func() map[string]any {
			return e.data(t, e.do(req{method: "GET", path: "/api/machines/1", cookie: e.cookie, header: map[string]string{"Host": "vps.example.com:7380"}}), 200)
		}
		d := get()
		port := int(d["tunnel_port"].(float64))
		if d["status"] != "pending" || d["status_reason"] != "never connected" || d["last_seen"] != nil || d["config_push"] != nil {
			t.Fatalf("fresh machine = %v", d)
		}
		// Not public: through the VPS, named as the dashboard was reached.
		if want := fmt.Sprintf("ssh -J root@vps.example.com -p %d pi@127.0.0.1", port); d["ssh_command"] != want || d["ssh_direct"] != false {
			t.Fatalf("ssh_command = %q (direct %v), want %q", d["ssh_command"], d["ssh_direct"], want)
		}

		ctx := context.Background()
		if err := e.svc.RecordConfigPush(ctx, 1, errors.New("the agent of machine 1 is not reachable")); err != nil {
			t.Fatal(err)
		}
		d = get()
		if d["status_reason"] != "config not delivered: the agent of machine 1 is not reachable" {
			t.Fatalf("status_reason = %q", d["status_reason"])
		}
		if p := d["config_push"].(map[string]any); p["ok"] != false || p["message"] != "the agent of machine 1 is not reachable" || p["at"] == nil {
			t.Fatalf("config_push = %v", p)
		}
		// A later push that works clears it; online needs no reason.
		if err := e.svc.RecordConfigPush(ctx, 1, nil); err != nil {
			t.Fatal(err)
		}
		if err := e.st.SetMachineStatus(ctx, 1, "online", e.now); err != nil {
			t.Fatal(err)
		}
		if d = get(); d["status_reason"] != "" || d["last_seen"] == nil || d["config_push"].(map[string]any)["ok"] != true {
			t.Fatalf("online machine = %v", d)
		}
		if err := e.st.SetMachineStatus(ctx, 1, "offline", e.now); err != nil {
			t.Fatal(err)
		}
		if d = get(); d["status_reason"] != "disconnected" {
			t.Fatalf("offline machine = %v", d)
		}

		// Listeners bound to a public address, no svc firewall: direct.
		x := machines.Exposure{Host: "router.example.com", BindIP: "203.0.113.5"}
		e.expose(t, x)
		if want := fmt.Sprintf("ssh -p %d pi@router.example.com", port); get()["ssh_command"] != want {
			t.Fatalf("ssh_command = %q, want %q", get()["ssh_command"], want)
		}
		// The svc firewall closes the port: through the VPS again.
		x.FirewallSvc = true
		e.expose(t, x)
		if want := fmt.Sprintf("ssh -J root@router.example.com -p %d pi@127.0.0.1", port); get()["ssh_command"] != want {
			t.Fatalf("ssh_command = %q, want %q", get()["ssh_command"], want)
		}
		// The list carries the same fields.
		if m := e.list(t, "/api/machines")[0].(map[string]any); m["ssh_command"] == "" || m["status_reason"] != "disconnected" {
			t.Fatalf("listed = %v", m)
		}
	})
}

// TestTokenLabelAndJoin: a token's label and times are listed, and the
// token can be followed until a machine registers with it.
func TestTokenLabelAndJoin(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		d := e.data(t, e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{"label":" Bob's laptop "}`, cookie: e.cookie}), 200)
		if d["label"] != "Bob's laptop" || d["created_at"] == nil || d["expires_at"] == nil {
			t.Fatalf("created = %v", d)
		}
		wantError(t, e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{"label":"` + strings.Repeat("x", 65) + `"}`, cookie: e.cookie}), 400, "label must be at most 64 characters")
		wantError(t, e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{"label":"a\u0007b"}`, cookie: e.cookie}), 400, "label must contain only printable characters")
		l := e.list(t, "/api/bootstrap/tokens")
		if len(l) != 1 {
			t.Fatalf("pending = %v", l)
		}
		if p := l[0].(map[string]any); p["label"] != "Bob's laptop" || p["created_at"] == nil || p["expires_at"] == nil {
			t.Fatalf("listed = %v", p)
		}
		id := fmt.Sprint(d["id"])
		got := e.data(t, e.do(req{method: "GET", path: "/api/bootstrap/tokens/" + id, cookie: e.cookie}), 200)
		if got["state"] != "pending" || got["machine_id"] != nil || got["label"] != "Bob's laptop" {
			t.Fatalf("token = %v", got)
		}
		e.data(t, e.bootstrap(t, d["token"].(string), "laptop"), 200)
		got = e.data(t, e.do(req{method: "GET", path: "/api/bootstrap/tokens/" + id, cookie: e.cookie}), 200)
		if got["state"] != "used" || got["machine_id"] != 1.0 {
			t.Fatalf("used token = %v", got)
		}
		wantError(t, e.do(req{method: "GET", path: "/api/bootstrap/tokens/99", cookie: e.cookie}), 404, "token not found")
		wantError(t, e.do(req{method: "GET", path: "/api/bootstrap/tokens/" + id}), 401, "authentication required")
	})
}

// TestTunnelAddresses: http tunnels carry their URL, tcp tunnels host:port,
// and every tunnel its machine's current name.
func TestTunnelAddresses(t *testing.T) {
	e := newMachinesEnv(t, wide)
	mid, _ := e.machine(t)
	post := func(body string) map[string]any {
		return e.data(t, e.do(req{method: "POST", path: "/api/tunnels", body: body, cookie: e.cookie}), 201)
	}
	web := post(`{"machine_id":` + mid + `,"name":"web","kind":"http","local_port":80,"subdomain":"wiki"}`)
	if web["url"] != "" || web["address"] != nil || web["machine_name"] != "box" {
		t.Fatalf("http tunnel without a domain = %v", web)
	}
	if r := web["reachability"].(map[string]any); r["state"] != "unknown" || r["checked_at"] != nil {
		t.Fatalf("reachability before any probe = %v", r)
	}
	db := post(`{"machine_id":` + mid + `,"name":"db","kind":"tcp","local_port":5432,"public":true}`)
	dbPort := int(db["remote_port"].(float64))
	if db["address"] != fmt.Sprintf("127.0.0.1:%d", dbPort) || db["url"] != nil || db["reachability"] != nil {
		t.Fatalf("tcp tunnel on loopback listeners = %v", db)
	}
	e.expose(t, machines.Exposure{Host: "router.example.com", Domain: "example.com", BindIP: "203.0.113.5"})
	e.data(t, e.do(req{method: "PATCH", path: "/api/machines/" + mid, body: `{"name":"nas"}`, cookie: e.cookie}), 200)
	byName := map[string]map[string]any{}
	for _, x := range e.list(t, "/api/tunnels") {
		byName[x.(map[string]any)["name"].(string)] = x.(map[string]any)
	}
	if w := byName["web"]; w["url"] != "https://wiki.example.com" || w["machine_name"] != "nas" {
		t.Fatalf("web = %v", w)
	}
	if d := byName["db"]; d["address"] != fmt.Sprintf("router.example.com:%d", dbPort) {
		t.Fatalf("public tcp tunnel = %v", d)
	}
	// Not public: only on the VPS's loopback.
	priv := e.data(t, e.do(req{method: "PATCH", path: "/api/tunnels/" + fmt.Sprint(db["id"]), body: `{"public":false}`, cookie: e.cookie}), 200)
	if priv["address"] != fmt.Sprintf("127.0.0.1:%d", dbPort) {
		t.Fatalf("private tcp tunnel = %v", priv)
	}
}

// TestMachineActivity: a machine's page shows its own events and its
// tunnels', nobody else's.
func TestMachineActivity(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		e.data(t, e.bootstrap(t, e.token(t), "a"), 200)
		e.data(t, e.bootstrap(t, e.token(t), "b"), 200)
		e.data(t, e.do(req{method: "POST", path: "/api/tunnels", body: `{"machine_id":1,"name":"db","kind":"tcp","local_port":5432}`, cookie: e.cookie}), 201)
		e.data(t, e.do(req{method: "POST", path: "/api/tunnels", body: `{"machine_id":2,"name":"web","kind":"tcp","local_port":80}`, cookie: e.cookie}), 201)
		e.data(t, e.do(req{method: "PATCH", path: "/api/machines/1", body: `{"name":"alpha"}`, cookie: e.cookie}), 200)
		var got []string
		for _, x := range e.list(t, "/api/local/activity?machine_id=1") {
			m := x.(map[string]any)
			if m["machine_id"] != 1.0 {
				t.Fatalf("event of another machine: %v", m)
			}
			got = append(got, m["source"].(string)+" "+m["kind"].(string))
		}
		if want := "machine renamed,tunnel created,machine registered"; strings.Join(got, ",") != want {
			t.Fatalf("activity = %v, want %s", got, want)
		}
		wantError(t, e.do(req{method: "GET", path: "/api/local/activity?machine_id=x", cookie: e.cookie}), 400, "machine_id must be a positive integer")
		wantError(t, e.do(req{method: "GET", path: "/api/local/activity?machine_id=99", cookie: e.cookie}), 404, "machine not found")
		if all := e.list(t, "/api/local/activity"); len(all) != 5 {
			t.Fatalf("the whole feed = %d events, want 5", len(all))
		}
	})
}

// TestSSHCommandIPv6: an IPv6 server address is bracketed for -J, which
// takes host[:port], and left bare as a destination.
func TestSSHCommandIPv6(t *testing.T) {
	e := newMachinesEnv(t, wide)
	e.data(t, e.bootstrap(t, e.token(t), "pi"), 200)
	e.expose(t, machines.Exposure{Host: "2001:db8::5"})
	d := e.data(t, e.do(req{method: "GET", path: "/api/machines/1", cookie: e.cookie}), 200)
	port := int(d["tunnel_port"].(float64))
	if want := fmt.Sprintf("ssh -J root@[2001:db8::5] -p %d pi@127.0.0.1", port); d["ssh_command"] != want {
		t.Fatalf("ssh_command = %q, want %q", d["ssh_command"], want)
	}
	e.expose(t, machines.Exposure{Host: "2001:db8::5", BindIP: "2001:db8::5"})
	d = e.data(t, e.do(req{method: "GET", path: "/api/machines/1", cookie: e.cookie}), 200)
	if want := fmt.Sprintf("ssh -p %d pi@2001:db8::5", port); d["ssh_command"] != want {
		t.Fatalf("ssh_command = %q, want %q", d["ssh_command"], want)
	}
}
