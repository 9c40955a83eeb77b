package api

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/site"
)

// siteEnv is a daemon with machines nas and pi joined and the domain
// example.com.
type siteEnv struct {
	*machinesEnv
	nas, pi string
}

func newSiteEnv(t *testing.T, engine string) *siteEnv {
	t.Helper()
	e := &siteEnv{machinesEnv: newMachinesEnvOn(t, engine, wide)}
	e.expose(t, machines.Exposure{Domain: "example.com", Host: "vps.example.com"})
	for _, name := range []string{"nas", "pi"} {
		e.data(t, e.bootstrap(t, e.token(t), name), 200)
	}
	for _, m := range e.list(t, "/api/machines") {
		m := m.(map[string]any)
		id := fmt.Sprint(m["id"])
		if m["name"] == "nas" {
			e.nas = id
		} else {
			e.pi = id
		}
	}
	return e
}

// apply posts text to /api/apply; it returns the answer and, when it is a
// 200, its change lines.
func (e *siteEnv) apply(t *testing.T, text string, dry, prune bool) (resp, []string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"spec": text, "dry_run": dry, "prune": prune})
	r := e.do(req{method: "POST", path: "/api/apply", body: string(b), cookie: e.cookie})
	if r.Code != 200 {
		return r, nil
	}
	var lines []string
	for _, c := range e.data(t, r, 200)["changes"].([]any) {
		lines = append(lines, c.(map[string]any)["text"].(string))
	}
	return r, lines
}

func (e *siteEnv) export(t *testing.T) string {
	t.Helper()
	return e.data(t, e.do(req{method: "GET", path: "/api/export", cookie: e.cookie}), 200)["yaml"].(string)
}

// tunnelNames is every tunnel as machine/name, sorted.
func (e *siteEnv) tunnelNames(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, x := range e.list(t, "/api/tunnels") {
		x := x.(map[string]any)
		out = append(out, fmt.Sprint(x["machine_name"], "/", x["name"]))
	}
	slices.Sort(out)
	return out
}

// TestApplyRoundTrip: export, then apply of what it wrote, says "no
// changes" on a cluster with a site on two machines and a gate of every
// mode, on both engines; the file shows no secret.
func TestApplyRoundTrip(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newSiteEnv(t, engine)
		e.ssoOn(t)
		for _, body := range []string{
			`{"machine_id":` + e.nas + `,"name":"grafana","kind":"http","local_port":3000,"subdomain":"grafana","access":"password","password":"correct horse battery staple",
			  "targets":[{"machine_id":` + e.nas + `,"local_port":3000},{"machine_id":` + e.pi + `,"local_port":3001}],"balance":"round_robin",
			  "health":{"path":"/healthz","interval_s":5,"expect_status":200},"domains":["grafana.example.org"],"rules":[{"path":"/api/*","action":"allow"}],"remember_days":30}`,
			`{"machine_id":` + e.nas + `,"name":"files","kind":"http","local_port":8080,"subdomain":"files","access":"operator","allow_ips":["203.0.113.0/24"]}`,
			`{"machine_id":` + e.pi + `,"name":"wiki","kind":"http","local_port":80,"subdomain":"wiki","access":"sso","sso_allow":["@example.com"],"fallback":{"message":"Back soon."},"proxy_protocol":"v2"}`,
			`{"machine_id":` + e.pi + `,"name":"status","kind":"http","local_port":81,"subdomain":"status"}`,
			`{"machine_id":` + e.pi + `,"name":"db","kind":"tcp","local_port":5432,"public":true,"proxy_protocol":"v1"}`,
			`{"machine_id":` + e.nas + `,"name":"dns","kind":"udp","local_port":53,"paused":true}`,
		} {
			e.data(t, e.do(req{method: "POST", path: "/api/tunnels", body: body, cookie: e.cookie}), 201)
		}
		e.data(t, e.do(req{method: "PUT", path: "/api/monitoring/notifications", body: `{"url":"https://ntfy.example.com/secret-topic","preset":"ntfy","offline_minutes":7}`, cookie: e.cookie}), 200)

		text := e.export(t)
		for _, want := range []string{"domain: example.com", "password: " + site.Kept, "url: " + site.Kept, "machine: pi\n        port: 3001", "round_robin", "- '@example.com'", "proxy_protocol: v1", "paused: true"} {
			if !strings.Contains(text, want) {
				t.Errorf("export lacks %q:\n%s", want, text)
			}
		}
		for _, secret := range []string{"argon2", "secret-topic", "correct horse"} {
			if strings.Contains(text, secret) {
				t.Errorf("export shows a secret (%q):\n%s", secret, text)
			}
		}
		for _, dry := range []bool{true, false} {
			r, lines := e.apply(t, text, dry, true)
			if r.Code != 200 || len(lines) != 0 {
				t.Fatalf("dry run %v of the export: %d %s", dry, r.Code, r.Body)
			}
			if e.data(t, r, 200)["applied"] != false {
				t.Fatalf("nothing to do, and applied: %s", r.Body)
			}
		}
		if rows := e.auditOf(t, auditApply); len(rows) != 0 {
			t.Fatalf("an apply with no changes was recorded: %v", rows)
		}
	})
}

// TestApplyChanges: the lines apply shows, a dry run that changes nothing,
// twice is "no changes", refusals that name their line and change
// nothing, all or none when the database refuses the second of two, and
// prune.
func TestApplyChanges(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newSiteEnv(t, engine)
		file := "version: 1\ndomain: example.com\ntunnels:\n" +
			"  - {name: grafana, machine: nas, kind: http, port: 3000, subdomain: grafana}\n" +
			"  - {name: db, machine: pi, kind: tcp, port: 5432, public: true}\n"
		want := []string{"+ tunnel grafana on nas (http 3000)", "+ tunnel db on pi (tcp 5432)"}
		if _, lines := e.apply(t, file, true, false); !slices.Equal(lines, want) {
			t.Fatalf("dry run: %q, want %q", lines, want)
		}
		if got := e.tunnelNames(t); len(got) != 0 {
			t.Fatalf("a dry run made %v", got)
		}
		if _, lines := e.apply(t, file, false, false); !slices.Equal(lines, want) {
			t.Fatalf("apply: %q", lines)
		}
		if got := e.tunnelNames(t); !slices.Equal(got, []string{"nas/grafana", "pi/db"}) {
			t.Fatalf("made %v", got)
		}
		if r, lines := e.apply(t, file, false, false); r.Code != 200 || len(lines) != 0 {
			t.Fatalf("applied twice: %d %q", r.Code, lines)
		}

		gated := strings.Replace(file, "subdomain: grafana}", "subdomain: grafana, access: operator}", 1)
		if _, lines := e.apply(t, gated, false, false); !slices.Equal(lines, []string{"~ tunnel grafana on nas: access public → operators only"}) {
			t.Fatalf("gate: %q", lines)
		}
		pw := strings.Replace(file, "subdomain: grafana}", "subdomain: grafana, access: password, password: correct horse battery staple}", 1)
		if _, lines := e.apply(t, pw, false, false); !slices.Equal(lines, []string{"~ tunnel grafana on nas: access operators only → shared password; password set"}) {
			t.Fatalf("password: %q", lines)
		}
		if r, lines := e.apply(t, pw, false, false); r.Code != 200 || len(lines) != 0 {
			t.Fatalf("the same password again: %d %q", r.Code, lines)
		}
		// Written otherwise than the gate keeps it, the same file is still
		// "no changes" the second time.
		loose := strings.Replace(file, "subdomain: grafana}", "subdomain: GRAFANA, access: sso, sso_allow: [' Alice@Example.COM', '@Example.org', '@example.org'], "+
			"allow_ips: ['203.0.113.5', '2001:DB8::1/32', '203.0.113.5'], rules: [{path: ' /api/*', action: allow}], domains: ['Grafana.Example.ORG.']}", 1)
		e.ssoOn(t)
		if r, lines := e.apply(t, loose, false, false); r.Code != 200 || len(lines) != 1 {
			t.Fatalf("loose: %d %q %s", r.Code, lines, r.Body)
		}
		if r, lines := e.apply(t, loose, false, false); r.Code != 200 || len(lines) != 0 {
			t.Fatalf("the loose file again: %d %q", r.Code, lines)
		}
		if _, lines := e.apply(t, pw, false, false); len(lines) != 1 {
			t.Fatalf("back to the password: %q", lines)
		}
		// Domains in any order, a webhook URL with spaces around it: the
		// second apply is no change either.
		more := pw + "  - {name: docs, machine: pi, kind: http, port: 81, subdomain: docs, domains: [z.example.org, a.example.org, Z.example.org.]}\n" +
			"webhook: {url: ' https://hooks.example.com/x ', preset: json}\n"
		if r, lines := e.apply(t, more, false, false); r.Code != 200 || len(lines) != 2 {
			t.Fatalf("more: %d %q %s", r.Code, lines, r.Body)
		}
		if r, lines := e.apply(t, more, false, false); r.Code != 200 || len(lines) != 0 {
			t.Fatalf("more, again: %d %q", r.Code, lines)
		}
		// A site moved to another machine in one apply: the removal goes
		// first, so the subdomain is free for the new one.
		moved := strings.Replace(more, "{name: docs, machine: pi, kind: http, port: 81", "{name: docs, machine: nas, kind: http, port: 81", 1)
		if r, lines := e.apply(t, moved, false, true); r.Code != 200 || !slices.Equal(lines, []string{"+ tunnel docs on nas (http 81)", "- tunnel docs on pi (http 81)"}) {
			t.Fatalf("moved: %d %q %s", r.Code, lines, r.Body)
		}
		if _, lines := e.apply(t, pw, false, true); !slices.Equal(lines, []string{"- tunnel docs on nas (http 81)"}) {
			t.Fatalf("back: %q", lines)
		}
		before := e.export(t)

		for _, c := range []struct{ text, msg string }{
			{file + "  - {name: web, machine: ghost, kind: http, port: 80, subdomain: web}\n",
				`line 6 (tunnels[2]): machine "ghost" has not joined this cluster`},
			{file + "  - {name: web, machine: nas, kind: http, port: 80, subdomain: web, colour: red}\n",
				`line 6: unknown field "colour"`},
			{strings.Replace(file, "kind: tcp", "kind: udp", 1),
				"line 5 (tunnels[1]): kind tcp → udp cannot be changed: give the tunnel another name (and prune the old one)"},
			{strings.Replace(file, "domain: example.com", "domain: example.net", 1),
				`line 2 (domain): the file is for "example.net", and this cluster's domain is "example.com": apply does not move a cluster to another domain (its set-up does)`},
			{file + "  - {name: a, machine: nas, kind: http, port: 80, subdomain: dup}\n  - {name: b, machine: pi, kind: http, port: 80, subdomain: dup}\n",
				"line 7 (tunnels[3]): + tunnel b on pi (http 80): subdomain is already in use"},
			{file + "  - {name: a, machine: nas, kind: http, port: 0, subdomain: a}\n",
				"line 6 (tunnels[2]): + tunnel a on nas (http 0): port must be between 1 and 65535"},
			{file + "  - {name: a, machine: nas, kind: http, port: 80, subdomain: a, targets: [{machine: pi, port: 80}, {machine: pi, port: 0}]}\n",
				"line 6 (tunnels[2]): + tunnel a on nas (http 80): targets[1].port must be between 1 and 65535"},
			{file + "  - {name: b, machine: pi, kind: tcp, port: 80, access: operator, fallback: hi}\n",
				"line 6 (tunnels[2]): access, fallback: only for http tunnels, and this one is tcp"},
			{file + "  - {name: b, machine: pi, kind: http, port: 80, subdomain: b, sso_allow: ['@example.com']}\n",
				`line 6 (tunnels[2]): sso_allow is only for access "sso"`},
			{strings.Replace(file, "tunnels:", "machines: [nas, nas2]\ntunnels:", 1),
				`line 3 (machines[1]): machine "nas2" has not joined this cluster: apply does not join machines (docs/machines.md)`},
			{file + "webhook: {url: <kept>, preset: slack}\n",
				"line 6 (webhook): preset must be one of: ntfy, json"},
			{file + "webhook: {url: 'ftp://x', preset: ntfy}\n",
				""},
			{file + "  - {name: grafana, machine: nas, kind: http, port: 1, subdomain: b}\n",
				`line 6 (tunnels[2]): tunnel "grafana" on "nas" is named twice (also tunnels[0])`},
		} {
			r, _ := e.apply(t, c.text, false, false)
			wantError(t, r, 400, c.msg)
			if after := e.export(t); after != before {
				t.Fatalf("a refused file (%s) changed the cluster:\n%s", c.msg, after)
			}
		}

		hook := pw + "webhook: {url: 'https://ntfy.example.com/secret-topic', preset: ntfy}\n"
		if _, lines := e.apply(t, hook, false, false); !slices.Equal(lines, []string{"~ webhook: https://ntfy.example.com/…, preset ntfy, offline after 5 min"}) {
			t.Fatalf("webhook: %q", lines)
		}
		if r, lines := e.apply(t, strings.Replace(hook, "'https://ntfy.example.com/secret-topic'", site.Kept, 1), false, false); r.Code != 200 || len(lines) != 0 {
			t.Fatalf("webhook kept: %d %q", r.Code, lines)
		}
		if rows := e.auditOf(t, KindNotifyChanged); len(rows) != 2 || strings.Contains(strings.Join(rows, " "), "secret-topic") {
			t.Fatalf("the webhook's audit rows: %q", rows)
		}
		without := "version: 1\ntunnels:\n  - {name: grafana, machine: nas, kind: http, port: 3000, subdomain: grafana, access: password, password: <kept>}\n"
		if _, lines := e.apply(t, without, false, false); len(lines) != 0 {
			t.Fatalf("without prune: %q", lines)
		}
		if _, lines := e.apply(t, without, false, true); !slices.Equal(lines, []string{"- tunnel db on pi (tcp 5432)"}) {
			t.Fatalf("prune: %q", lines)
		}
		if got := e.tunnelNames(t); !slices.Equal(got, []string{"nas/grafana"}) {
			t.Fatalf("after prune: %v", got)
		}
	})
}

// TestApplyAudit: one APPLY row names the token and the number of
// changes, beside each change's own row; a read token cannot apply.
func TestApplyAudit(t *testing.T) {
	e := newSiteEnv(t, sqliteEngine)
	tok := func(scope string) string {
		return e.data(t, e.do(req{method: "POST", path: "/api/tokens", body: `{"name":"ci-` + scope + `","scope":"` + scope + `"}`, cookie: e.cookie}), 201)["token"].(string)
	}
	file := "version: 1\ntunnels:\n  - {name: grafana, machine: nas, kind: http, port: 3000, subdomain: grafana}\n  - {name: db, machine: pi, kind: tcp, port: 5432}\n"
	b, _ := json.Marshal(map[string]any{"spec": file})
	wantError(t, e.withToken("POST", "/api/apply", tok("read"), string(b)), 403, "")
	r := e.withToken("POST", "/api/apply", tok("write"), string(b))
	if r.Code != 200 {
		t.Fatalf("apply with a write token: %d %s", r.Code, r.Body)
	}
	if rows := e.auditOf(t, auditApply); len(rows) != 1 || !strings.Contains(rows[0], "applied a site file: 2 changes") || !strings.Contains(rows[0], `API token "ci-write"`) {
		t.Fatalf("APPLY rows: %q", rows)
	}
	created := e.auditOf(t, auditTunnelCreated)
	if len(created) != 2 || !strings.Contains(strings.Join(created, "\n"), `http tunnel "grafana" created on machine "nas"`) {
		t.Fatalf("TUNNEL_CREATED rows: %q", created)
	}
	// The spec may also be the file as a JSON object.
	obj := `{"spec":{"version":1,"tunnels":[{"name":"grafana","machine":"nas","kind":"http","port":3000,"subdomain":"grafana","paused":true},{"name":"db","machine":"pi","kind":"tcp","port":5432}]},"dry_run":true}`
	if got := e.data(t, e.do(req{method: "POST", path: "/api/apply", body: obj, cookie: e.cookie}), 200); fmt.Sprint(got["changes"]) != "[map[op:~ place:line 1 (tunnels[0]) text:~ tunnel grafana on nas: paused no → yes]]" {
		t.Fatalf("a JSON spec: %v", got)
	}
	wantError(t, e.do(req{method: "POST", path: "/api/apply", body: `{"spec":"version: 1\ntunnels: []\n","force":true}`, cookie: e.cookie}), 400, "")
	wantError(t, e.do(req{method: "POST", path: "/api/apply", body: `{}`, cookie: e.cookie}), 400, "spec is required: the file's text")
}

// TestApplySchemaServed: GET /api/apply/schema.json is the schema, for
// anyone (editors fetch it), and the one in docs/.
func TestApplySchemaServed(t *testing.T) {
	e := newEnv(t)
	r := e.do(req{method: "GET", path: "/api/apply/schema.json"})
	if r.Code != 200 || r.Header().Get("Content-Type") != "application/schema+json" || r.Body.String() != string(site.Schema) {
		t.Fatalf("%d %s %.100s", r.Code, r.Header().Get("Content-Type"), r.Body)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "site.schema.json"))
	if err != nil || string(doc) != string(site.Schema) {
		t.Fatalf("docs/site.schema.json is not the served schema (%v): run make docs", err)
	}
}

// TestApplyDryRunGuesses: a dry run would tell whether a password is the
// gate's; its comparisons are on record, and wrong ones count against the
// address like wrong passwords, up to 429.
func TestApplyDryRunGuesses(t *testing.T) {
	e := newSiteEnv(t, sqliteEngine)
	file := "version: 1\ntunnels:\n  - {name: g, machine: nas, kind: http, port: 80, subdomain: g, access: password, password: %s}\n"
	if r, _ := e.apply(t, fmt.Sprintf(file, "correct horse battery staple"), false, false); r.Code != 200 {
		t.Fatalf("%d %s", r.Code, r.Body)
	}
	for i := range 20 {
		r, lines := e.apply(t, fmt.Sprintf(file, fmt.Sprintf("wrong guess number %d", i)), true, false)
		if r.Code == 429 {
			if i < 5 {
				t.Fatalf("limited after %d guesses", i)
			}
			if rows := e.auditOf(t, auditApply); len(rows) < i || !strings.Contains(rows[0], "dry run of a site file compared 1 gate password") {
				t.Fatalf("APPLY rows: %q", rows)
			}
			return
		}
		if r.Code != 200 || !slices.Equal(lines, []string{"~ tunnel g on nas: password changed"}) {
			t.Fatalf("guess %d: %d %q", i, r.Code, lines)
		}
	}
	t.Fatal("20 wrong guesses in dry runs, and no 429")
}
