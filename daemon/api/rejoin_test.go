package api

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
)

func (e *machinesEnv) rejoin(agentToken, peer string) resp {
	q := req{method: "POST", path: "/api/machines/rejoin", peer: peer}
	if agentToken != "" {
		q.header = map[string]string{"Authorization": "Bearer " + agentToken}
	}
	return e.do(q)
}

// TestRejoinKeepsTheMachine: a rejoin answers what /api/bootstrap answers,
// for the same machine (id, name, ports, tunnels), with a fresh agent token;
// the old token stops working; the operator sees it in the audit log.
func TestRejoinKeepsTheMachine(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		id, oldToken := e.machine(t)
		e.data(t, e.do(req{method: "PATCH", path: "/api/machines/" + id, body: `{"name":"nas"}`, cookie: e.cookie}), 200)
		tun := e.data(t, e.do(req{method: "POST", path: "/api/tunnels", body: `{"machine_id":` + id + `,"name":"db","kind":"tcp","local_port":5432}`, cookie: e.cookie}), 201)
		before := e.data(t, e.do(req{method: "GET", path: "/api/machines/" + id, cookie: e.cookie}), 200)

		d := e.data(t, e.rejoin(oldToken, "198.51.100.8:6000"), 200)
		if d["rejoined"] != true || fmt.Sprint(d["machine_id"]) != id || d["name"] != "nas" {
			t.Fatalf("rejoin = %v", d)
		}
		if d["tunnel_port"] != before["tunnel_port"] || d["agent_local_port"] != before["agent_local_port"] || d["vps_ssh_public_key"] != e.vpsKey(t) {
			t.Fatalf("rejoin = %v, machine before = %v", d, before)
		}
		newToken := d["agent_token"].(string)
		if newToken == "" || newToken == oldToken {
			t.Fatalf("agent token not replaced: %q", newToken)
		}
		cfg := d["revtunnel_client_config"].(string)
		for _, want := range []string{"user = 'm" + id + "'", fmt.Sprintf("remotePort = %v", before["tunnel_port"]), fmt.Sprintf("remotePort = %v", tun["remote_port"]), "localPort = 5432"} {
			if !strings.Contains(cfg, want) {
				t.Errorf("client config lacks %q:\n%s", want, cfg)
			}
		}

		after := e.data(t, e.do(req{method: "GET", path: "/api/machines/" + id, cookie: e.cookie}), 200)
		for _, k := range []string{"id", "name", "username", "tunnel_port", "agent_port", "agent_local_port", "created_at"} {
			if after[k] != before[k] {
				t.Errorf("%s changed: %v → %v", k, before[k], after[k])
			}
		}
		if after["client_addr"] != "198.51.100.8" {
			t.Errorf("client_addr = %v", after["client_addr"])
		}
		// The new agent gets its config pushed: the machine is pending.
		if c := after["config"].(map[string]any); c["state"] != "pending" {
			t.Errorf("config after rejoin = %v, want pending", c)
		}
		if ts := e.list(t, "/api/tunnels?machine_id="+id); len(ts) != 1 || ts[0].(map[string]any)["remote_port"] != tun["remote_port"] {
			t.Errorf("tunnels after rejoin = %v", ts)
		}
		// The daemon reaches the new agent with the new token.
		acc, err := e.svc.Agent(context.Background(), int64(after["id"].(float64)))
		if err != nil || acc.Token != newToken {
			t.Fatalf("agent access = %+v, %v", acc, err)
		}
		// The same config is what the dashboard shows.
		if c := e.do(req{method: "GET", path: "/api/machines/" + id + "/revtunnel-client", cookie: e.cookie}); c.Body.String() != cfg {
			t.Errorf("client config served = %s\nrejoin gave %s", c.Body, cfg)
		}

		// The old token is dead, for rejoin and for self-delete; the new one works.
		wantError(t, e.rejoin(oldToken, "198.51.100.8:6000"), 401, "unknown agent token: no machine holds it (deleted, or rejoined since); join this machine again with a new token from the dashboard (Machines > Add machine)")
		wantError(t, e.do(req{method: "POST", path: "/api/machines/self-delete", header: map[string]string{"Authorization": "Bearer " + oldToken}}), 401, "invalid agent token")
		again := e.data(t, e.rejoin(newToken, "198.51.100.8:6000"), 200)
		if fmt.Sprint(again["machine_id"]) != id || again["agent_token"] == newToken {
			t.Fatalf("second rejoin = %v", again)
		}
		if ms := e.list(t, "/api/machines"); len(ms) != 1 {
			t.Fatalf("machines = %v", ms)
		}

		entries, err := e.st.ListAudit(context.Background(), 100)
		if err != nil {
			t.Fatal(err)
		}
		var rejoins []string
		for _, a := range entries {
			if a.Kind == "MACHINE_REJOINED" {
				rejoins = append(rejoins, a.Detail)
			}
		}
		if len(rejoins) != 2 {
			t.Fatalf("MACHINE_REJOINED entries = %q", rejoins)
		}
		// Newest first: the second rejoin came from the same address.
		if want := `machine "nas" rejoined (tunnel port ` + fmt.Sprint(before["tunnel_port"]) + ` kept); agent token replaced`; rejoins[0] != want {
			t.Errorf("second audit = %q, want %q", rejoins[0], want)
		}
		if want := "; address 198.51.100.7 → 198.51.100.8"; !strings.HasSuffix(rejoins[1], want) {
			t.Errorf("first audit = %q, want it to end with %q", rejoins[1], want)
		}
		// The activity feed says it too.
		found := false
		for _, ev := range e.list(t, "/api/local/activity?machine_id="+id) {
			if strings.Contains(ev.(map[string]any)["message"].(string), `machine "nas" rejoined from 198.51.100.8`) {
				found = true
			}
		}
		if !found {
			t.Error("no rejoin in the machine's activity")
		}
	})
}

func TestRejoinUnknownToken(t *testing.T) {
	e := newMachinesEnv(t, wide)
	const msg = "unknown agent token: no machine holds it (deleted, or rejoined since); join this machine again with a new token from the dashboard (Machines > Add machine)"
	wantError(t, e.rejoin("", "198.51.100.9:1"), 401, msg)
	wantError(t, e.rejoin("nope", "198.51.100.9:1"), 401, msg)
	_, tok := e.machine(t)
	e.data(t, e.do(req{method: "POST", path: "/api/machines/self-delete", header: map[string]string{"Authorization": "Bearer " + tok}}), 200)
	wantError(t, e.rejoin(tok, "198.51.100.9:1"), 401, msg)
	stale := e.list(t, "/api/security/stale-tokens")
	if len(stale) == 0 || stale[0].(map[string]any)["reason"] != "rejoin with an unknown agent token" || stale[0].(map[string]any)["client_addr"] != "198.51.100.9" {
		t.Fatalf("stale = %v", stale)
	}
	for _, k := range e.auditKinds() {
		if k == "MACHINE_REJOINED" {
			t.Fatal("a refused rejoin was audited as a rejoin")
		}
	}
}

// TestRejoinRateLimit: guessed agent tokens count against the address like
// bad bootstrap tokens; then even a good one waits.
func TestRejoinRateLimit(t *testing.T) {
	e := newMachinesEnv(t, wide)
	_, tok := e.machine(t)
	for i := 0; i < auth.MaxFailures; i++ {
		wantError(t, e.rejoin(fmt.Sprintf("guess%d", i), "203.0.113.5:1"), 401, rejoinRefused)
	}
	r := e.rejoin(tok, "203.0.113.5:1")
	wantError(t, r, 429, "")
	if r.Header().Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	// Another address is not held back, and the token still works.
	e.data(t, e.rejoin(tok, "203.0.113.6:1"), 200)
}

// TestRejoinCommand: the line shown for a machine whose agent predates fleet
// updates, on the join command's base URL.
func TestRejoinCommand(t *testing.T) {
	e := newMachinesEnv(t, wide)
	r := httptest.NewRequest("GET", "/api/machines", nil)
	r.Host = "vps.example.com:7380"
	got, err := e.srv.rejoinCommand(r)
	if want := "curl -fsSL http://vps.example.com:7380/static/bootstrap.sh | sudo bash -s -- --rejoin"; err != nil || got != want {
		t.Fatalf("rejoinCommand = %q, %v; want %q", got, err, want)
	}
	e = newMachinesEnvWith(t, sqliteEngine, wide, func(c *config.Config) { c.BaseURL = "https://tunnels.example.org" })
	if got, _ := e.srv.rejoinCommand(r); got != "curl -fsSL https://tunnels.example.org/static/bootstrap.sh | sudo bash -s -- --rejoin" {
		t.Fatalf("with --base-url: %q", got)
	}
	e = newMachinesEnvWith(t, sqliteEngine, wide, func(c *config.Config) { c.BaseURL = "https://tunnels.example.org/$(id)" })
	if _, err := e.srv.rejoinCommand(r); err == nil {
		t.Fatal("a hostile --base-url gave a command")
	}
	if got := machines.RejoinOverSSH("ssh -J root@vps.example.com -p 20001 pi@127.0.0.1", "curl -fsSL http://x/static/bootstrap.sh | sudo bash -s -- --rejoin"); got !=
		`ssh -t -J root@vps.example.com -p 20001 pi@127.0.0.1 'curl -fsSL http://x/static/bootstrap.sh | sudo bash -s -- --rejoin'` {
		t.Fatalf("over SSH: %s", got)
	}
}
