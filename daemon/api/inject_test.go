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
	if calls := e.units.Calls(); calls != "" {
		t.Fatalf("a refused bind_ip restarted units: %s", calls)
	}
	if after := e.do(req{method: "GET", path: "/api/debug/webproxyfile", cookie: e.cookie}).Body.String(); after != before {
		t.Fatalf("a refused bind_ip changed the proxy file:\n%s", after)
	}
}

// A domain leaves room for a 63-character subdomain in front of it, so
// every site the proxy serves has a valid name.
func TestDomainLeavesRoomForSubdomains(t *testing.T) {
	e := newLocalEnv(t, nil)
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 62) // 190
	for _, path := range []string{"/api/local/install", "/api/local/skip"} {
		wantError(t, e.do(req{method: "POST", path: path, body: `{"domain":"` + long + `"}`, cookie: e.cookie}), 400, "invalid domain")
	}
	if st := e.status(t); st.Domain != "" {
		t.Fatalf("a refused domain was stored: %q", st.Domain)
	}
	if r := e.do(req{method: "POST", path: "/api/local/skip", body: `{"domain":"` + long[1:] + `"}`, cookie: e.cookie}); r.Code != 200 {
		t.Fatalf("a 189-character domain was refused: %d %s", r.Code, r.Body)
	}
}

// server_host goes into every machine's frpc config: a zone is refused.
func TestServerHostRefusesZones(t *testing.T) {
	e := newLocalEnv(t, nil)
	wantError(t, e.do(req{method: "POST", path: "/api/local/install", body: `{"skip_webproxy":true,"server_host":"fe80::1%lo"}`, cookie: e.cookie}),
		400, "invalid server_host: an address with a zone (%...) is not accepted")
	wantError(t, e.do(req{method: "GET", path: "/api/local/resolve-ip?host=fe80::1%25lo", cookie: e.cookie}), 400, "invalid host")
}
