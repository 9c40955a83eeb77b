package webproxy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A gated tunnel's site: caddy validate accepts it, caddy fmt leaves it as
// it is, and only the operator-mode site passes X-Forwarded-User on.
func TestGoldenGates(t *testing.T) {
	needCaddy(t)
	in := Input{Domain: "example.com", Dashboard: "127.0.0.1:7380", Gate: "127.0.0.1:7382",
		Tunnels: []HTTPTunnel{{"wiki", 20011}, {"grafana", 20007}, {"nas-ui", 20003}},
		Gates:   map[string]GateMode{"grafana": GateOperator}}
	got, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "gates", got)
	if err := caddyValidate(t, got); err != nil {
		t.Fatalf("caddy validate refused the gated Caddyfile: %v", err)
	}
	path := filepath.Join(t.TempDir(), "Caddyfile")
	os.WriteFile(path, got, 0o644)
	if out, err := exec.Command("caddy", "fmt", path).Output(); err != nil || string(out) != string(got) {
		t.Fatalf("caddy fmt would change the file (%v):\n%s", err, out)
	}
	if n := strings.Count(string(got), "copy_headers Cookie X-Forwarded-User"); n != 1 {
		t.Fatalf("%d sites pass X-Forwarded-User on, want 1 (grafana)", n)
	}
}

func TestGatesNeedGateAddress(t *testing.T) {
	_, err := Render(Input{Domain: "example.com", Tunnels: []HTTPTunnel{{"wiki", 20011}}, Gates: map[string]GateMode{"wiki": GateOperator}})
	if err == nil {
		t.Fatal("a gated tunnel rendered without a gate address")
	}
}
