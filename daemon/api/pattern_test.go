package api

import (
	"context"
	"regexp"
	"strings"
	"testing"
)

// TestTunnelNamePatternIsTheServersRule: the pattern openapi.yaml gives
// the dashboard for tunnel names and subdomains accepts exactly what the
// server accepts (after lower-casing), so the form and the server agree.
func TestTunnelNamePatternIsTheServersRule(t *testing.T) {
	// The label patterns: every one at that depth but a health check's path.
	m := regexp.MustCompile(`(?m)^ {10}pattern: (\^\[a-z.+)$`).FindAllStringSubmatch(string(openAPISpec), -1)
	if len(m) < 3 {
		t.Fatalf("found %d patterns in openapi.yaml", len(m))
	}
	pat := m[0][1]
	for _, x := range m {
		if x[1] != pat {
			t.Fatalf("patterns differ: %q and %q", pat, x[1])
		}
	}
	re := regexp.MustCompile(pat)
	e := newMachinesEnv(t, wide)
	mid, _ := e.machine(t)
	inputs := []string{"a", "web", "w-1", "0", "-a", "a-", "a--b", "a_b", "a.b", "a b", "é", "", "Web",
		strings.Repeat("a", 63), strings.Repeat("a", 64), "a" + strings.Repeat("-", 61) + "b", "x-" + strings.Repeat("9", 61)}
	for i, in := range inputs {
		want := re.MatchString(strings.ToLower(in))
		body := `{"machine_id":` + mid + `,"kind":"tcp","local_port":1,"name":` + quote(in) + `}`
		r := e.do(req{method: "POST", path: "/api/tunnels", body: body, cookie: e.cookie})
		if got := r.Code == 201; got != want {
			t.Errorf("input %d %q: server accepted %v (%d %s), pattern %v", i, in, got, r.Code, r.Body, want)
		}
		if r.Code == 201 {
			e.st.DeleteTunnel(context.Background(), int64(r.json(t)["data"].(map[string]any)["id"].(float64)))
		}
	}
}

func quote(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
}
