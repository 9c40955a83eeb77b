package webproxy

import (
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
)

// A gated tunnel's site matches its golden file, only the operator-mode
// site passes X-Forwarded-User on, and caddy validate and caddy fmt accept
// it (when caddy is installed).
func TestGoldenGates(t *testing.T) {
	in := Input{Domain: "example.com", Dashboard: "127.0.0.1:7380", Gate: "127.0.0.1:7382",
		Tunnels: []HTTPTunnel{{Subdomain: "wiki", Port: 20011}, {Subdomain: "grafana", Port: 20007}, {Subdomain: "nas-ui", Port: 20003}},
		Gates:   map[string]GateMode{"grafana": GateOperator}}
	got, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "gates", got)
	if n := strings.Count(string(got), "copy_headers Cookie X-Forwarded-User"); n != 1 {
		t.Fatalf("%d sites pass X-Forwarded-User on, want 1 (grafana)", n)
	}
	caddyAccepts(t, "gates", got)
}

func TestGatesNeedGateAddress(t *testing.T) {
	_, err := Render(Input{Domain: "example.com", Tunnels: []HTTPTunnel{{Subdomain: "wiki", Port: 20011}}, Gates: map[string]GateMode{"wiki": GateOperator}})
	if err == nil {
		t.Fatal("a gated tunnel rendered without a gate address")
	}
}

// TestTokenHeadersNeverReachTheApp: the Caddyfile removes what the gate
// reads as a bypass token, by the gate's own names.
func TestTokenHeadersNeverReachTheApp(t *testing.T) {
	file, err := Render(Input{Domain: "example.com", Dashboard: "127.0.0.1:7380", Gate: "127.0.0.1:7382",
		Tunnels: []HTTPTunnel{{Subdomain: "app", Port: 20001}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"request_header -" + gate.TokenHeader + "\n", `header_regexp Authorization "^Bearer +` + gate.TokenPrefix + `"`} {
		if !strings.Contains(string(file), want) {
			t.Fatalf("the Caddyfile lacks %q:\n%s", want, file)
		}
	}
}
