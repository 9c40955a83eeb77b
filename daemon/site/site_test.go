package site

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	yaml "go.yaml.in/yaml/v3"

	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

const full = `version: 1
domain: example.com
machines: [nas, pi]
tunnels:
  - name: grafana
    machine: nas
    kind: http
    port: 3000
    subdomain: grafana
    access: password
    password: <kept>
    allow_ips: [203.0.113.0/24]
    rules:
      - {path: /api/*, action: allow}
      - {path: /admin*, action: deny}
    remember_days: 30
    targets: [{machine: pi, port: 3000}]
    balance: round_robin
    health: {path: /healthz, interval_s: 5, expect_status: 200}
    domains: [grafana.example.org]
    proxy_protocol: v2
    fallback: Back soon.
  - name: db
    machine: pi
    kind: tcp
    port: 5432
    public: true
    paused: true
webhook:
  url: <kept>
  preset: ntfy
  offline_minutes: 5
`

func TestParseFull(t *testing.T) {
	p, err := Parse([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	g := p.Spec.Tunnels[0]
	if g.Key() != "nas/grafana" || g.Targets[0] != (Target{"pi", 3000}) || g.Health.IntervalS != 5 || len(g.Rules) != 2 {
		t.Fatalf("grafana = %+v", g)
	}
	if p.Tunnels[0].Line != 5 || p.Tunnels[1].Line != 23 || p.Webhook.Line != 29 {
		t.Fatalf("places %+v webhook %+v", p.Tunnels, p.Webhook)
	}
	if got := p.Tunnels[1].String(); got != "line 23 (tunnels[1])" {
		t.Fatalf("place = %q", got)
	}
}

// TestParseRefusals: what a file gets wrong is named with its line, in the
// file's words.
func TestParseRefusals(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"version: 1\ntunnels:\n  - name: a\n    machine: m\n    kind: tcp\n    prot: 1\n", `line 6: unknown field "prot"`},
		{"version: 1\ntunnels: []\ncolour: red\n", `line 3: unknown field "colour"`},
		{"version: 2\ntunnels: []\n", "line 1 (version): version must be 1 (this server reads version 1 files)"},
		{"tunnels: []\n", "version: version must be 1"},
		{"version: 1\ntunnels:\n  - name: a\n    port: many\n", `line 4: "many" is not a number`},
		{"version: 1\ntunnels: []\n---\nversion: 1\n", "line 3: a second document: a file holds one"},
		{"", "the file is empty"},
		{"version: 1\n  tunnels: [\n", "line 2"},
		{"version: 1\ntunnels:\n  - name: a\n    public: maybe\n", `line 4: "maybe" is not true or false`},
		{"version: 1\ntunnels: {a: 1}\n", `line 2: a mapping of fields is not a list`},
	} {
		_, err := Parse([]byte(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.text, err, c.want)
		}
	}
	if _, err := Parse(bytes.Repeat([]byte("#"), MaxBytes+1)); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a large file: %v", err)
	}
}

// TestMarshalParses: what export writes reads back the same, through YAML
// and through the schema.
func TestMarshalParses(t *testing.T) {
	p, err := Parse([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Marshal(p.Spec)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	a, _ := json.Marshal(p.Spec)
	b, _ := json.Marshal(back.Spec)
	if !bytes.Equal(a, b) {
		t.Fatalf("round trip:\n%s\n%s", a, b)
	}
	if err := schema(t).Validate(jsonOf(t, out)); err != nil {
		t.Fatalf("export does not pass its schema: %v", err)
	}
}

// TestSchemaRefuses: the schema refuses what Parse and the API refuse, so
// an editor shows it first.
func TestSchemaRefuses(t *testing.T) {
	s := schema(t)
	for _, bad := range []string{
		"version: 1\ntunnels:\n  - {name: a, machine: m, kind: tcp, port: 1, prot: 1}\n",
		"version: 1\ntunnels:\n  - {name: a, machine: m, kind: ftp, port: 1}\n",
		"version: 1\ntunnels:\n  - {name: a, machine: m, kind: tcp, port: 70000}\n",
		"version: 1\ntunnels:\n  - {name: A_b, machine: m, kind: tcp, port: 1}\n",
		"version: 1\ntunnels:\n  - {name: a, machine: m, kind: http, port: 1, remember_days: 91}\n",
		"version: 1\ntunnels:\n  - {name: a, machine: m, kind: http, port: 1, rules: [{path: x, action: allow}]}\n",
		"version: 1\ntunnels: []\nwebhook: {url: x, preset: slack}\n",
		"version: 3\ntunnels: []\n",
	} {
		if err := s.Validate(jsonOf(t, []byte(bad))); err == nil {
			t.Errorf("the schema passes %q", bad)
		}
	}
}

// TestSchemaBoundsAreTheServers: the schema's limits are the constants the
// API checks.
func TestSchemaBoundsAreTheServers(t *testing.T) {
	var doc struct {
		Defs map[string]struct {
			Properties map[string]map[string]any `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(Schema, &doc); err != nil {
		t.Fatal(err)
	}
	tp := doc.Defs["tunnel"].Properties
	for name, c := range map[string]struct {
		key  string
		want int
	}{
		"rules":         {"maxItems", gate.MaxRules},
		"remember_days": {"maximum", machines.MaxRememberDays},
		"fallback":      {"maxLength", webproxy.MaxFallbackChars},
		"targets":       {"maxItems", machines.MaxTargets - 1},
	} {
		if got := tp[name][c.key]; got != float64(c.want) {
			t.Errorf("%s.%s = %v, the server's is %d", name, c.key, got, c.want)
		}
	}
	// Every field of the file is in the schema, and nothing else.
	for def, typ := range map[string]any{"tunnel": Tunnel{}, "rule": Rule{}, "target": Target{}, "health": Health{}, "webhook": Webhook{}} {
		b, _ := yaml.Marshal(typ)
		var keys map[string]any
		yaml.Unmarshal(b, &keys)
		for k := range doc.Defs[def].Properties {
			delete(keys, k)
		}
		for k := range keys {
			t.Errorf("%s.%s is not in the schema", def, k)
		}
	}
}

// TestSchemaInDocs: docs/site.schema.json is the schema the API serves
// (make docs copies it).
func TestSchemaInDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "site.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, Schema) {
		t.Fatal("docs/site.schema.json differs from daemon/site/schema.json: run make docs")
	}
}

func schema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("site.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("site.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// jsonOf is a YAML file as the JSON value a schema validator takes.
func jsonOf(t *testing.T, text []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(text, &v); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPlanWebhook: <kept> needs a webhook to keep; a URL is compared as the
// notifier keeps it (trimmed, defaults filled in).
func TestPlanWebhook(t *testing.T) {
	p, err := Parse([]byte("version: 1\ntunnels: []\nwebhook: {url: <kept>}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Plan(p, Cluster{}, false, nil); err == nil || err.Error() != "line 3 (webhook): url <kept> keeps a webhook, and none is set yet: give its URL" {
		t.Fatalf("kept with none: %v", err)
	}
	have := &Webhook{URL: "https://h.example.com/x", Preset: "json", OfflineMinutes: 5}
	if ch, err := Plan(p, Cluster{Webhook: have}, false, nil); err != nil || len(ch) != 0 {
		t.Fatalf("kept: %v %v", ch, err)
	}
	p, _ = Parse([]byte("version: 1\ntunnels: []\nwebhook: {url: ' https://h.example.com/x '}\n"))
	if ch, err := Plan(p, Cluster{Webhook: have}, false, nil); err != nil || len(ch) != 0 {
		t.Fatalf("the same URL with spaces: %v %v", ch, err)
	}
}
