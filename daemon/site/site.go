// Package site is the cluster's declarable state as a file: the machines
// by name, the tunnels with everything the dashboard sets on them, the
// domain and the webhook. `tunnelsvc export` writes one; `tunnelsvc apply`
// (POST /api/apply) makes the cluster match one, all or none.
//
// The file never holds a secret the cluster keeps: a password gate and the
// webhook's URL are exported as Kept, and Kept in a file applied means
// "leave it as it is".
package site

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Version is the file format's version; a file names it.
const Version = 1

// Kept stands for a secret the cluster keeps and the file does not show.
const Kept = "<kept>"

// Schema is the file's JSON Schema (draft 2020-12), served at
// /api/apply/schema.json and kept in docs/site.schema.json.
//
//go:embed schema.json
var Schema []byte

// Spec is one file.
type Spec struct {
	Version int `yaml:"version" json:"version"`
	// Domain is the cluster the file describes: apply refuses a file for
	// another domain (moving a cluster to a new domain is its set-up's).
	Domain   string   `yaml:"domain,omitempty" json:"domain,omitempty"`
	Machines []string `yaml:"machines,omitempty" json:"machines,omitempty"`
	Tunnels  []Tunnel `yaml:"tunnels" json:"tunnels"`
	Webhook  *Webhook `yaml:"webhook,omitempty" json:"webhook,omitempty"`
}

// Tunnel is one tunnel, named by its machine and its name.
type Tunnel struct {
	Name    string `yaml:"name" json:"name"`
	Machine string `yaml:"machine" json:"machine"`
	Kind    string `yaml:"kind" json:"kind"`
	// Port is the service's port on its machine (local_port).
	Port      int    `yaml:"port" json:"port"`
	Subdomain string `yaml:"subdomain,omitempty" json:"subdomain,omitempty"`
	Public    bool   `yaml:"public,omitempty" json:"public,omitempty"`
	Paused    bool   `yaml:"paused,omitempty" json:"paused,omitempty"`
	// The gate (http): public when absent.
	Access       string   `yaml:"access,omitempty" json:"access,omitempty"`
	Password     string   `yaml:"password,omitempty" json:"password,omitempty"`
	AllowIPs     []string `yaml:"allow_ips,omitempty" json:"allow_ips,omitempty"`
	SSOAllow     []string `yaml:"sso_allow,omitempty" json:"sso_allow,omitempty"`
	Rules        []Rule   `yaml:"rules,omitempty" json:"rules,omitempty"`
	RememberDays int      `yaml:"remember_days,omitempty" json:"remember_days,omitempty"`
	// Targets are the other machines serving the site, after its own.
	Targets       []Target `yaml:"targets,omitempty" json:"targets,omitempty"`
	Balance       string   `yaml:"balance,omitempty" json:"balance,omitempty"`
	Health        *Health  `yaml:"health,omitempty" json:"health,omitempty"`
	Domains       []string `yaml:"domains,omitempty" json:"domains,omitempty"`
	ProxyProtocol string   `yaml:"proxy_protocol,omitempty" json:"proxy_protocol,omitempty"`
	Fallback      string   `yaml:"fallback,omitempty" json:"fallback,omitempty"`
}

// Target is another machine serving an http tunnel.
type Target struct {
	Machine string `yaml:"machine" json:"machine"`
	Port    int    `yaml:"port" json:"port"`
}

// Rule is a path rule before the gate.
type Rule struct {
	Path   string `yaml:"path" json:"path"`
	Action string `yaml:"action" json:"action"`
}

// Health is an http tunnel's health check.
type Health struct {
	Path         string `yaml:"path" json:"path"`
	IntervalS    int    `yaml:"interval_s,omitempty" json:"interval_s,omitempty"`
	ExpectStatus int    `yaml:"expect_status,omitempty" json:"expect_status,omitempty"`
}

// Webhook is where notifications go.
type Webhook struct {
	URL            string `yaml:"url" json:"url"`
	Preset         string `yaml:"preset,omitempty" json:"preset,omitempty"`
	OfflineMinutes int    `yaml:"offline_minutes,omitempty" json:"offline_minutes,omitempty"`
}

// Key names a tunnel in a file and in the cluster: its machine and name.
func (t Tunnel) Key() string { return t.Machine + "/" + t.Name }

// Place is where something is in the file: a line, and its path.
type Place struct {
	Line int
	Path string
}

func (p Place) String() string {
	if p.Line == 0 {
		return p.Path
	}
	return fmt.Sprintf("line %d (%s)", p.Line, p.Path)
}

// PlaceError is a refusal that names its place in the file.
type PlaceError struct {
	Place Place
	Err   error
}

func (e *PlaceError) Error() string { return e.Place.String() + ": " + e.Err.Error() }
func (e *PlaceError) Unwrap() error { return e.Err }

// Parsed is a file read: its spec, and where each tunnel begins.
type Parsed struct {
	Spec Spec
	// Tunnels[i] is where tunnels[i] begins.
	Tunnels []Place
	// Machines[i] is where machines[i] is named.
	Machines []Place
	// Webhook and Domain are where those begin.
	Webhook, Domain Place
}

// MaxBytes bounds a file.
const MaxBytes = 512 << 10

// Parse reads a file (YAML, or JSON, which is YAML too). Unknown fields,
// a second document and a wrong version are refused in words that name
// the line.
func Parse(text []byte) (Parsed, error) {
	var p Parsed
	if len(text) > MaxBytes {
		return p, fmt.Errorf("the file is larger than %d bytes", MaxBytes)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(text, &root); err != nil {
		return p, yamlError(err)
	}
	if len(root.Content) == 0 {
		return p, errors.New("the file is empty")
	}
	dec := yaml.NewDecoder(bytes.NewReader(text))
	dec.KnownFields(true)
	if err := dec.Decode(&p.Spec); err != nil {
		return p, yamlError(err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); err == nil {
		return p, fmt.Errorf("line %d: a second document: a file holds one", more.Line)
	}
	p.places(root.Content[0])
	if p.Spec.Version != Version {
		return p, &PlaceError{Place{Line: p.valueLine(root.Content[0], "version"), Path: "version"},
			fmt.Errorf("version must be %d (this server reads version %d files)", Version, Version)}
	}
	return p, nil
}

// yamlError is yaml's error in the file's words: "line 7: unknown field
// "prot"", "line 4: "many" is not a number", not Go's type names.
func yamlError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n  ")
	msg = strings.ReplaceAll(msg, "\n  ", "; ")
	msg = unknownField.ReplaceAllString(msg, `unknown field "$1"`)
	return errors.New(wrongType.ReplaceAllStringFunc(msg, func(m string) string {
		g := wrongType.FindStringSubmatch(m)
		if g[2] == "" {
			return fmt.Sprintf("%s is not %s", kindWords[g[1]], typeWords(g[3]))
		}
		return fmt.Sprintf("%q is not %s", strings.Trim(g[2], "`"), typeWords(g[3]))
	}))
}

var (
	unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)
	wrongType    = regexp.MustCompile("cannot unmarshal !!(\\w+)(?: (`[^`]*`|[^ `]+))? into (\\S+)")
	kindWords    = map[string]string{"map": "a mapping of fields", "seq": "a list", "str": "text", "int": "a number", "bool": "true or false", "null": "nothing"}
)

// typeWords is a Go type as a file's reader knows it.
func typeWords(goType string) string {
	switch {
	case goType == "int":
		return "a number"
	case goType == "bool":
		return "true or false"
	case goType == "string":
		return "text"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	}
	return "a mapping of fields"
}

// places finds where each tunnel, the webhook and the domain begin.
func (p *Parsed) places(doc *yaml.Node) {
	p.Tunnels = make([]Place, len(p.Spec.Tunnels))
	for i := range p.Tunnels {
		p.Tunnels[i] = Place{Path: fmt.Sprintf("tunnels[%d]", i)}
	}
	if doc.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], doc.Content[i+1]
		switch k.Value {
		case "tunnels":
			for j, item := range v.Content {
				if j < len(p.Tunnels) {
					p.Tunnels[j].Line = item.Line
				}
			}
		case "machines":
			for j, item := range v.Content {
				p.Machines = append(p.Machines, Place{Line: item.Line, Path: fmt.Sprintf("machines[%d]", j)})
			}
		case "webhook":
			p.Webhook = Place{Line: k.Line, Path: "webhook"}
		case "domain":
			p.Domain = Place{Line: k.Line, Path: "domain"}
		}
	}
	if p.Webhook.Path == "" {
		p.Webhook.Path = "webhook"
	}
	if p.Domain.Path == "" {
		p.Domain.Path = "domain"
	}
}

// valueLine is the line of key in the mapping doc (0: absent).
func (p *Parsed) valueLine(doc *yaml.Node, key string) int {
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value == key {
			return doc.Content[i].Line
		}
	}
	return 0
}

// Marshal writes s as the file export prints, with a heading comment.
func Marshal(s Spec) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# tunnelsvc site: apply with `tunnelsvc apply -f <file>`.\n")
	b.WriteString("# Secrets are not shown: " + Kept + " keeps the cluster's own.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Normalize puts t in the form export writes, so that a file and the
// cluster compare equal when they mean the same: lower-case names,
// defaults left out, the gate's lists as the gate keeps them, domains
// sorted, each once.
func (t *Tunnel) Normalize() {
	t.Name = strings.ToLower(strings.TrimSpace(t.Name))
	t.Machine = strings.ToLower(strings.TrimSpace(t.Machine))
	t.Subdomain = strings.ToLower(strings.TrimSpace(t.Subdomain))
	t.Access = strings.TrimSpace(t.Access)
	if t.Access == "public" {
		t.Access = ""
	}
	if t.Balance == "failover" {
		t.Balance = ""
	}
	if t.Health != nil && t.Health.Path == "" {
		t.Health = nil
	}
	if t.Health != nil && t.Health.IntervalS == 0 {
		t.Health.IntervalS = machines.DefaultHealthInterval
	}
	for i := range t.Targets {
		t.Targets[i].Machine = strings.ToLower(strings.TrimSpace(t.Targets[i].Machine))
	}
	for i, d := range t.Domains {
		t.Domains[i] = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(d)), ".")
	}
	// The store lists a site's own domains in order, each once.
	slices.Sort(t.Domains)
	t.Domains = slices.Compact(t.Domains)
	t.canonicalGate()
	for _, l := range []*[]string{&t.AllowIPs, &t.SSOAllow, &t.Domains} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	if len(t.Rules) == 0 {
		t.Rules = nil
	}
	if len(t.Targets) == 0 {
		t.Targets = nil
	}
}

// Same reports whether the cluster's tunnel have matches the file's want,
// both normalized. A password of Kept (or none, while have has one)
// matches; a password given is compared by the caller (it is hashed).
func Same(have, want Tunnel) bool {
	want.Password, have.Password = "", ""
	return reflect.DeepEqual(have, want)
}

// Sorted returns the tunnels in export's order: by machine, then name.
func Sorted(ts []Tunnel) []Tunnel {
	out := slices.Clone(ts)
	slices.SortFunc(out, func(a, b Tunnel) int {
		if c := strings.Compare(a.Machine, b.Machine); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// canonicalGate writes the gate's lists as the gate keeps them (through
// its own parsers), so that a file that means the same as the cluster
// compares equal. Entries the gate refuses are left as written, for the
// API to refuse in its words.
func (t *Tunnel) canonicalGate() {
	if out, bad := gate.ParseAllowList(t.AllowIPs); len(bad) == 0 {
		t.AllowIPs = out
	}
	if out, err := gate.ParseSSOAllow(t.SSOAllow); err == nil {
		t.SSOAllow = out
	}
	rules := make([]store.AccessRule, len(t.Rules))
	for i, r := range t.Rules {
		rules[i] = store.AccessRule{Path: r.Path, Action: r.Action}
	}
	if out, err := gate.ParseRules(rules); err == nil {
		t.Rules = t.Rules[:0]
		for _, r := range out {
			t.Rules = append(t.Rules, Rule{Path: r.Path, Action: r.Action})
		}
	}
}
