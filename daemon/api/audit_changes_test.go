package api

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestAuditRecordsDashboardChanges: machine, tunnel and token changes are
// in the audit log with the client's address and names, and the log
// filters by category or exact kind.
func TestAuditRecordsDashboardChanges(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
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
			{"MACHINE_RENAMED", "machine", "192.0.2.44", `machine renamed: "pi" → "garage-pi"`},
			{"MACHINE_REGISTERED", "machine", "198.51.100.7", `machine "pi" (user pi) registered with tunnel port <port>`},
			// The first registration made the VPS's default SSH key.
			{"SSH_KEY_ADDED", "ssh_key", "", `(Default key, SHA256:<fingerprint>) generated`},
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
			if w.kind == "SSH_KEY_ADDED" {
				if g.kind != w.kind || g.addr != "" || !strings.Contains(g.detail, "(Default key, SHA256:") || !strings.HasSuffix(g.detail, ") generated") {
					t.Errorf("entry %d = %+v, want the default key generated", i, g)
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
	})
}

// TestAuditTunnelChangesSayWhat: every tunnel change is recorded as old →
// new in words, access, password and allow list included (a switch from
// password to operator-only, then an allow list, once recorded "changed:
// nothing" three times); the password itself never is. A request that
// changes nothing records nothing.
func TestAuditTunnelChangesSayWhat(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		e.data(t, e.bootstrap(t, e.token(t), "pi"), 200)
		const pw = `"a long shared passphrase"`
		e.data(t, e.do(req{method: "POST", path: "/api/tunnels", cookie: e.cookie,
			body: `{"machine_id":1,"name":"web","kind":"http","local_port":80,"subdomain":"wiki","access":"password","password":` + pw + `}`}), 201)
		e.data(t, e.do(req{method: "POST", path: "/api/tunnels", cookie: e.cookie,
			body: `{"machine_id":1,"name":"db","kind":"tcp","local_port":5432}`}), 201)
		_, last := auditAfter(t, e.testEnv, e.cookie, 0)
		const web = `tunnel "web" of machine "pi" changed: `
		cases := []struct {
			name, path, body string
			want             []auditRow
		}{
			{"password to operator-only", "/api/tunnels/1", `{"access":"operator"}`,
				[]auditRow{{"TUNNEL_UPDATED", web + "access shared password → operators only; password removed"}}},
			{"an allow list", "/api/tunnels/1", `{"allow_ips":["203.0.113.0/24","2001:db8::/32"]}`,
				[]auditRow{{"TUNNEL_UPDATED", web + "allow list any address → 203.0.113.0/24, 2001:db8::/32"}}},
			{"the same allow list again", "/api/tunnels/1", `{"allow_ips":["203.0.113.0/24","2001:db8::/32"]}`, nil},
			{"back to a password", "/api/tunnels/1", `{"access":"password","password":` + pw + `}`,
				[]auditRow{{"TUNNEL_UPDATED", web + "access operators only → shared password; password set"}}},
			{"a new password", "/api/tunnels/1", `{"password":"another long passphrase here"}`,
				[]auditRow{{"TUNNEL_UPDATED", web + "password changed"}}},
			{"public with any address", "/api/tunnels/1", `{"access":"public","allow_ips":[]}`,
				[]auditRow{{"TUNNEL_UPDATED", web + "access shared password → public; password removed; allow list 203.0.113.0/24, 2001:db8::/32 → any address"}}},
			{"name, port and subdomain", "/api/tunnels/1", `{"name":"docs","local_port":8080,"subdomain":"docs"}`,
				[]auditRow{{"TUNNEL_UPDATED", web + `name "web" → "docs"; local port 80 → 8080; subdomain "wiki" → "docs"`}}},
			{"nothing", "/api/tunnels/1", `{}`, nil},
			{"another machine, round robin, a health check, an own domain", "/api/tunnels/1",
				`{"targets":[{"machine_id":1,"local_port":8080},{"machine_id":1,"local_port":8081}],"balance":"round_robin","health":{"path":"/healthz","interval_s":5},"domains":["docs.example.org"]}`,
				[]auditRow{{"TUNNEL_UPDATED", `tunnel "docs" of machine "pi" changed: other machines none → pi:8081; balance failover → round_robin; health check none → GET /healthz every 5 s, any 2xx; own domains none → docs.example.org`}}},
			{"the same again", "/api/tunnels/1",
				`{"targets":[{"machine_id":1,"local_port":8080},{"machine_id":1,"local_port":8081}],"balance":"round_robin","health":{"path":"/healthz","interval_s":5},"domains":["docs.example.org"]}`, nil},
			{"tcp made public", "/api/tunnels/2", `{"public":true}`,
				[]auditRow{{"TUNNEL_UPDATED", `tunnel "db" of machine "pi" changed: public no → yes`}}},
			{"a refused change", "/api/tunnels/2", `{"access":"operator"}`, nil},
			{"a PROXY protocol header", "/api/tunnels/2", `{"proxy_protocol":"v2"}`,
				[]auditRow{{"TUNNEL_UPDATED", `tunnel "db" of machine "pi" changed: PROXY protocol off → v2`}}},
			{"a refused PROXY protocol", "/api/tunnels/2", `{"proxy_protocol":"v3"}`, nil},
			{"PROXY protocol v1 on the site", "/api/tunnels/1", `{"proxy_protocol":"v1"}`,
				[]auditRow{{"TUNNEL_UPDATED", `tunnel "docs" of machine "pi" changed: PROXY protocol off → v1`}}},
			{"a fallback page", "/api/tunnels/1", `{"fallback":{"message":"Back at 14:00.\nThanks."}}`,
				[]auditRow{{"TUNNEL_UPDATED", `tunnel "docs" of machine "pi" changed: fallback page none → "Back at 14:00. Thanks."`}}},
			{"path rules and a remembered sign-in", "/api/tunnels/1",
				`{"access":"password","password":` + pw + `,"rules":[{"path":"/api/*","action":"allow"},{"path":"/admin*","action":"deny"}],"remember_days":30}`,
				[]auditRow{{"TUNNEL_UPDATED", `tunnel "docs" of machine "pi" changed: access public → shared password; password set; path rules none → /api/* allow, /admin* deny; sign-ins last a day → 30 days`}}},
			{"machine renamed", "/api/machines/1", `{"name":"garage-pi"}`,
				[]auditRow{{"MACHINE_RENAMED", `machine renamed: "pi" → "garage-pi"`}}},
			{"machine renamed to its name", "/api/machines/1", `{"name":"garage-pi"}`, nil},
		}
		refusals := map[string]string{"a refused change": "access is only for http tunnels",
			"a refused PROXY protocol": `proxy_protocol must be "" (none), "v1" or "v2"`}
		for _, c := range cases {
			r := e.do(req{method: "PATCH", path: c.path, body: c.body, cookie: e.cookie})
			if refusal, ok := refusals[c.name]; ok {
				wantError(t, r, 400, refusal)
			} else if r.Code != 200 {
				t.Fatalf("%s: %d %s", c.name, r.Code, r.Body)
			}
			var got []auditRow
			got, last = auditAfter(t, e.testEnv, e.cookie, last)
			if !slices.Equal(got, c.want) {
				t.Errorf("%s: audit rows\n got %q\nwant %q", c.name, got, c.want)
			}
			for _, g := range got {
				if strings.Contains(g.Detail, "passphrase") {
					t.Errorf("%s: the audit log holds the password: %q", c.name, g.Detail)
				}
			}
		}
	})
}

// TestAuditSettingsChangesSayWhat: each settings change is recorded as old
// → new in words; a webhook URL shows only its scheme and host (a token
// may live in its path), and a save that changes nothing records nothing.
func TestAuditSettingsChangesSayWhat(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newSettingsEnvOn(t, engine)
		_, last := auditAfter(t, e.testEnv, e.cookie, 0)
		cases := []struct {
			name, method, path, body string
			want                     []auditRow
		}{
			{"bind IP set", "PUT", "/api/local/bind-ip", `{"bind_ip":"203.0.113.5"}`,
				[]auditRow{{"SETTINGS_CHANGED", "bind IP every address → 203.0.113.5"}}},
			{"bind IP unchanged", "PUT", "/api/local/bind-ip", `{"bind_ip":"203.0.113.5"}`, nil},
			{"bind IP cleared", "PUT", "/api/local/bind-ip", `{"bind_ip":""}`,
				[]auditRow{{"SETTINGS_CHANGED", "bind IP 203.0.113.5 → every address"}}},
			{"private dashboard", "PUT", "/api/local/server-ports", `{"dashboard_private":true}`,
				[]auditRow{{"SETTINGS_CHANGED", "private dashboard no → yes"}}},
			{"ACME CA", "PUT", "/api/local/acme", `{"acme_ca":"https://acme-staging-v02.api.letsencrypt.org/directory"}`,
				[]auditRow{{"SETTINGS_CHANGED", "ACME CA Let's Encrypt → https://acme-staging-v02.api.letsencrypt.org/directory"}}},
			{"ACME CA back", "PUT", "/api/local/acme", `{"acme_ca":""}`,
				[]auditRow{{"SETTINGS_CHANGED", "ACME CA https://acme-staging-v02.api.letsencrypt.org/directory → Let's Encrypt"}}},
			{"domain at skip", "POST", "/api/local/skip", `{"domain":"Example.com"}`,
				[]auditRow{{"SETTINGS_CHANGED", `set-up skipped; domain (none) → "example.com"`}}},
			{"firewall manual", "POST", "/api/local/firewall/configure", `{"mode":"manual"}`,
				[]auditRow{{"FIREWALL_CHANGED", "firewall mode none → manual"}}},
			{"firewall manual again", "POST", "/api/local/firewall/configure", `{"mode":"manual"}`, nil},
			{"firewall svc", "POST", "/api/local/firewall/configure", `{"mode":"svc"}`,
				// Then how the takeover ended, as its own row.
				[]auditRow{{"FIREWALL_CHANGED", "firewall mode manual → svc: takeover started"}, {"FIREWALL_TAKEOVER_FINISHED", "firewall takeover finished"}}},
			{"ban tool", "PUT", "/api/security/banner/config", `{"max_retry":3,"find_time":600,"ban_time":86400}`,
				[]auditRow{{"BANNER_CONFIG_CHANGED", "max retries 5 → 3; ban time 3600 s → 86400 s"}}},
			{"webhook on", "PUT", "/api/monitoring/notifications", `{"url":"https://ntfy.sh/secret-topic","preset":"ntfy"}`,
				[]auditRow{{"NOTIFICATIONS_CHANGED", "webhook off → https://ntfy.sh/…; preset json → ntfy"}}},
			{"webhook topic", "PUT", "/api/monitoring/notifications", `{"url":"https://ntfy.sh/other-topic","preset":"ntfy","offline_minutes":15}`,
				[]auditRow{{"NOTIFICATIONS_CHANGED", "webhook URL changed (same host: https://ntfy.sh/…); offline after 5 min → 15 min"}}},
			{"webhook off", "PUT", "/api/monitoring/notifications", `{"url":"","preset":"ntfy","offline_minutes":15}`,
				[]auditRow{{"NOTIFICATIONS_CHANGED", "webhook https://ntfy.sh/… → off"}}},
			{"metrics token", "POST", "/api/monitoring/metrics-token", ``,
				[]auditRow{{"METRICS_TOKEN_CREATED", "/metrics token: none → a new one"}}},
			{"metrics token again", "POST", "/api/monitoring/metrics-token", ``,
				[]auditRow{{"METRICS_TOKEN_CREATED", "/metrics token replaced by a new one (the old one no longer works)"}}},
		}
		for _, c := range cases {
			r := e.do(req{method: c.method, path: c.path, body: c.body, cookie: e.cookie})
			if r.Code != 200 {
				t.Fatalf("%s: %d %s", c.name, r.Code, r.Body)
			}
			e.waitOperation(t)
			var got []auditRow
			got, last = auditAfter(t, e.testEnv, e.cookie, last)
			if !slices.Equal(got, c.want) {
				t.Errorf("%s: audit rows\n got %q\nwant %q", c.name, got, c.want)
			}
			for _, g := range got {
				if strings.Contains(g.Detail, "topic") {
					t.Errorf("%s: the audit log holds the webhook's path: %q", c.name, g.Detail)
				}
			}
		}
	})
}

// TestSSHKeyMachineCount: each machine records the key it was given; the
// key list counts them.
func TestSSHKeyMachineCount(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
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
	})
}
