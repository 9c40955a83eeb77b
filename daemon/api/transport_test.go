package api

import (
	"fmt"
	"strings"
	"testing"
)

func (e *machinesEnv) chooseTransport(agentToken, body string) resp {
	q := req{method: "POST", path: "/api/machines/transport", peer: "198.51.100.9:6000", body: body}
	if agentToken != "" {
		q.header = map[string]string{"Authorization": "Bearer " + agentToken}
	}
	return e.do(q)
}

// TestMachineChoosesItsTransport: a machine whose network lets only 443
// out asks for the wss transport with its agent token and gets a config
// that dials the web proxy's HTTPS port with the same credential and CA;
// the dashboard shows the choice, the audit log names it, and a new
// generation goes to its agent. Bad input changes nothing.
func TestMachineChoosesItsTransport(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		id, token := e.machine(t)
		before := e.data(t, e.do(req{method: "GET", path: "/api/machines/" + id, cookie: e.cookie}), 200)
		if tr := before["transport"].(map[string]any); tr["configured"] != "tcp" || tr["seen"] != "" {
			t.Fatalf("transport of a new machine: %v", tr)
		}

		wantError(t, e.chooseTransport(token, `{"transport":"kcp"}`), 400, `transport must be "tcp" or "wss"`)
		wantError(t, e.chooseTransport(token, `{}`), 400, `transport required ("tcp" or "wss")`)
		wantError(t, e.chooseTransport(token, `{"transport":`), 400, "invalid request body")
		for _, tok := range []string{"not-a-token", ""} {
			wantError(t, e.chooseTransport(tok, `{"transport":"wss"}`), 401, "unknown agent token: no machine holds it (deleted, or rejoined since); join this machine again with a new token from the dashboard (Machines > Add machine)")
		}
		if tr := e.data(t, e.do(req{method: "GET", path: "/api/machines/" + id, cookie: e.cookie}), 200)["transport"].(map[string]any); tr["configured"] != "tcp" {
			t.Fatalf("a refused choice changed the transport: %v", tr)
		}

		d := e.data(t, e.chooseTransport(token, `{"transport":"wss"}`), 200)
		cfg, _ := d["revtunnel_client_config"].(string)
		if d["transport"] != "wss" || fmt.Sprint(d["machine_id"]) != id {
			t.Fatalf("answer: %v", d)
		}
		for _, want := range []string{"protocol = 'wss'", "serverPort = 443", "user = 'm" + id + "'", "serverName = 'revtunnel-server.tunnelsvc.invalid'", "BEGIN CERTIFICATE"} {
			if !strings.Contains(cfg, want) {
				t.Errorf("wss config lacks %q:\n%s", want, cfg)
			}
		}
		after := e.data(t, e.do(req{method: "GET", path: "/api/machines/" + id, cookie: e.cookie}), 200)
		tr := after["transport"].(map[string]any)
		if tr["configured"] != "wss" || tr["summary"] != "connects over port 443 (wss, through the web proxy); not connected yet" {
			t.Fatalf("transport after the choice: %v", tr)
		}
		c := after["config"].(map[string]any)
		if c["state"] != "pending" || c["desired_generation"].(float64) <= before["config"].(map[string]any)["desired_generation"].(float64) {
			t.Fatalf("config after the choice: %v (before %v)", c, before["config"])
		}
		// What the dashboard shows is what the machine got.
		if got := e.do(req{method: "GET", path: "/api/machines/" + id + "/revtunnel-client", cookie: e.cookie}); got.Body.String() != cfg {
			t.Fatalf("served config differs:\n%s\nvs\n%s", got.Body, cfg)
		}
		audit := e.list(t, "/api/security/logs")
		found := false
		for _, a := range audit {
			m := a.(map[string]any)
			if m["kind"] == "MACHINE_TRANSPORT_CHOSEN" && strings.Contains(fmt.Sprint(m["detail"]), "chose the wss transport") {
				found = true
			}
		}
		if !found {
			t.Fatalf("no MACHINE_TRANSPORT_CHOSEN in the audit log: %v", audit)
		}
	})
}
