package webproxy

import (
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
)

// FuzzCaddyfile: for any domain, tunnel subdomains, port and bind_ip the
// API's validators accept (the same validate functions, after the same
// lower-casing and trimming), Render writes a Caddyfile with exactly the
// shape of one rendered from plain values (no directive, block or comment
// the input did not name), and caddy validate accepts it. Values the
// validators refuse are refused by Render too.
func FuzzCaddyfile(f *testing.F) {
	for _, s := range []struct {
		domain, sub1, sub2 string
		port               int
		bind               string
	}{
		{"example.com", "wiki", "grafana", 20011, "203.0.113.5"},
		{"Example.COM", "nas-ui", "x", 65535, "2001:db8::1"},
		{"example.com", "wiki", "wiki", 1, ""},
		{"example.com", "a", "b", 20000, "fe80::1%lo\n}\nimport /etc/shadow\n{"},
		{"example.com", "a", "b", 20000, "::ffff:192.0.2.1"},
		{"example.com\n}\nimport /etc/shadow", "a", "b", 20000, ""},
		{"example.com", "a\n}", "b {", 20000, ""},
		{"{$HOME}.com", "a", "b", 20000, ""},
		{"example.com", "#x", "`id`", 20000, ""},
		{"example.com", "\"q\"", "$(id)", 20000, ""},
		{"exämple.com", "wíki", "b", 20000, ""},
		{strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 61), strings.Repeat("s", 63), "b", 20000, ""},
		{"example.com", "a", "b", 0, "203.0.113.5 "},
	} {
		f.Add(s.domain, s.sub1, s.sub2, s.port, s.bind)
	}
	f.Fuzz(func(t *testing.T, domain, sub1, sub2 string, port int, bind string) {
		domain = strings.ToLower(strings.TrimSpace(domain))
		sub1, sub2 = strings.ToLower(strings.TrimSpace(sub1)), strings.ToLower(strings.TrimSpace(sub2))
		bind = strings.TrimSpace(bind)
		in := Input{Domain: domain, Dashboard: "127.0.0.1:7380", Tunnels: []HTTPTunnel{{Subdomain: sub1, Port: port}}}
		if sub2 != sub1 { // the store keeps subdomains unique
			in.Tunnels = append(in.Tunnels, HTTPTunnel{Subdomain: sub2, Port: port})
		}
		accepted := validate.Domain(domain) == nil && validate.Label(sub1) == nil && validate.Label(sub2) == nil && validate.Port(port) == nil
		if bind != "" {
			a, err := validate.IP(bind)
			accepted = accepted && err == nil
			if err == nil {
				in.BindIP = a.String()
			} else {
				in.BindIP = bind
			}
		}
		got, err := Render(in)
		if !accepted {
			if err == nil {
				t.Fatalf("Render accepted what the validators refuse: %+v\n%s", in, got)
			}
			return
		}
		if err != nil {
			t.Fatalf("Render refused what the API accepts (%+v): %v", in, err)
		}
		base := Input{Domain: "example.com", Dashboard: "127.0.0.1:7380", Tunnels: []HTTPTunnel{{Subdomain: "a", Port: 20000}}}
		if len(in.Tunnels) == 2 {
			base.Tunnels = append(base.Tunnels, HTTPTunnel{Subdomain: "b", Port: 20001})
		}
		if in.BindIP != "" {
			base.BindIP = "192.0.2.1"
		}
		want, err := Render(base)
		if err != nil {
			t.Fatal(err)
		}
		if testutil.Shape(string(got)) != testutil.Shape(string(want)) {
			t.Fatalf("the Caddyfile for %+v has a shape of its own:\n%s\n--- plain values give\n%s", in, got, want)
		}
		if testutil.RealToolSample(200) {
			needCaddy(t)
			if err := caddyValidate(t, got); err != nil {
				t.Fatalf("caddy validate refused the Caddyfile for %+v: %v\n%s", in, err, got)
			}
		}
	})
}
