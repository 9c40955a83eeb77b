package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// Issue 12 item 4: a zoned address carried a newline and a Caddyfile
// directive into the generated file. It must be refused with a clear 400
// and change nothing.
func TestBindIPRefusesZonesAndInjection(t *testing.T) {
	e := newLocalEnv(t, nil)
	if r := e.do(req{method: "POST", path: "/api/local/skip", body: `{"domain":"example.com"}`, cookie: e.cookie}); r.Code != 200 {
		t.Fatalf("skip: %d %s", r.Code, r.Body)
	}
	before := e.do(req{method: "GET", path: "/api/debug/webproxyfile", cookie: e.cookie}).Body.String()
	for _, bad := range []string{
		"fe80::1%lo\n}\nimport /etc/shadow\n{",
		"fe80::1%lo",
		"fe80::1%eth0",
		"::ffff:10.0.0.1%x",
		"203.0.113.5\n}",
		"203.0.113.5 }",
	} {
		body, _ := json.Marshal(map[string]string{"bind_ip": bad})
		r := e.do(req{method: "PUT", path: "/api/local/bind-ip", body: string(body), cookie: e.cookie})
		if r.Code != 400 {
			t.Fatalf("bind_ip %q: status %d, want 400; body %s", bad, r.Code, r.Body)
		}
		msg, _ := r.json(t)["error"].(string)
		if !strings.HasPrefix(msg, "bind_ip must be") || strings.Contains(msg, "\n") || strings.Contains(msg, "shadow") {
			t.Fatalf("bind_ip %q: message %q is not a clear one-line refusal", bad, msg)
		}
	}
	if st := e.status(t); st.BindIP != "" {
		t.Fatalf("a refused bind_ip was stored: %q", st.BindIP)
	}
	if e.tunnels.n != 0 {
		t.Fatalf("a refused bind_ip reconciled the tunnel server %d times", e.tunnels.n)
	}
	if after := e.do(req{method: "GET", path: "/api/debug/webproxyfile", cookie: e.cookie}).Body.String(); after != before {
		t.Fatalf("a refused bind_ip changed the proxy file:\n%s", after)
	}
}
