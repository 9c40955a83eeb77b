package api

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
)

// TestACMESetting: PUT /api/local/acme refuses every bad value with a 400
// that says why and changes nothing; a good one shows in the status and in
// the Caddyfile, and is deployed at once when the proxy is installed.
func TestACMESetting(t *testing.T) {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Skip("caddy is not installed (scripts/install-deps.sh installs it)")
	}
	e := newLocalEnv(t, nil)
	root, err := filepath.Abs("../webproxy/testdata/acme-root.pem")
	if err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	os.WriteFile(notPEM, []byte("just text\n"), 0o644)
	body := func(ca, caRoot string) string {
		b, _ := json.Marshal(map[string]string{"acme_ca": ca, "acme_ca_root": caRoot})
		return string(b)
	}
	const badURL = "acme_ca must be the https URL of an ACME directory, for example https://acme-staging-v02.api.letsencrypt.org/directory (empty: Let's Encrypt)"
	const badPath = "acme_ca_root must be the absolute path of a PEM file (letters, digits and . _ / + @ - only)"
	const staging = "https://acme-staging-v02.api.letsencrypt.org/directory"
	cases := []struct{ body, msg string }{
		{`{`, "invalid request body"},
		{`{}`, "acme_ca is required (an empty string means Let's Encrypt)"},
		{`{"acme_ca_root":"` + root + `"}`, "acme_ca is required (an empty string means Let's Encrypt)"},
		{`{"acme_ca":7}`, "invalid request body"},
		{body("http://acme.example.com/directory", ""), badURL},
		{body("acme.example.com/directory", ""), badURL},
		{body("https://acme.example.com/dir ectory", ""), badURL},
		{body("https://acme.example.com/directory\n}\n:80 {", ""), badURL},
		{body("https://acme.example.com/{env.HOME}", ""), badURL},
		{body("https://user@acme.example.com/directory", ""), badURL},
		{body("https://acme.example.com/directory?x=1", ""), badURL},
		{body("https://acme.example.com:99999/directory", ""), badURL},
		{body("https://-bad-.example.com/directory", ""), badURL},
		{body("", root), "acme_ca_root is only used with another ACME CA than Let's Encrypt: give its directory URL in acme_ca"},
		{body(localsetup.DefaultACMECA, root), "acme_ca_root is only used with another ACME CA than Let's Encrypt: give its directory URL in acme_ca"},
		{body(staging, "acme-root.pem"), badPath},
		{body(staging, "/etc/../etc/acme-root.pem"), badPath},
		{body(staging, "/etc/my root.pem"), badPath},
		{body(staging, "/nonexistent/acme-root.pem"), "acme_ca_root: cannot read /nonexistent/acme-root.pem: no such file or directory"},
		{body(staging, notPEM), "acme_ca_root: " + notPEM + " holds no PEM certificate"},
	}
	for _, c := range cases {
		wantError(t, e.do(req{method: "PUT", path: "/api/local/acme", body: c.body, cookie: e.cookie}), 400, c.msg)
	}
	// Let's Encrypt until another CA is set.
	if st := e.status(t); st.ACMECA != localsetup.DefaultACMECA || st.ACMECARoot != "" {
		t.Fatalf("a refused request changed the setting: %+v", st)
	}

	// Saved before any install: the status and the proxy file show it.
	r := e.do(req{method: "PUT", path: "/api/local/acme", body: body(" "+staging+" ", ""), cookie: e.cookie})
	if r.Code != 200 || strings.TrimSpace(r.Body.String()) != `{"data":{"acme_ca":"`+staging+`","acme_ca_root":""}}` {
		t.Fatalf("PUT acme: %d %s", r.Code, r.Body)
	}
	if r := e.do(req{method: "POST", path: "/api/local/skip", body: `{"domain":"example.com"}`, cookie: e.cookie}); r.Code != 200 {
		t.Fatalf("skip: %d %s", r.Code, r.Body)
	}
	if f := e.do(req{method: "GET", path: "/api/debug/webproxyfile", cookie: e.cookie}).Body.String(); !strings.Contains(f, "\tacme_ca "+staging+"\n") || strings.Contains(f, "acme_ca_root") {
		t.Fatalf("proxy file:\n%s", f)
	}

	// Installed: a change is deployed at once.
	if err := e.setup.Settings.SaveVPS(context.Background(), localsetup.VPS{Domain: "example.com", ServerHost: "router.example.com", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	private := "https://127.0.0.1:14000/dir"
	if r := e.do(req{method: "PUT", path: "/api/local/acme", body: body(private, root), cookie: e.cookie}); r.Code != 200 {
		t.Fatalf("PUT acme with a root: %d %s", r.Code, r.Body)
	}
	deployed, err := os.ReadFile(e.setup.Proxy.Path)
	if err != nil || !strings.Contains(string(deployed), "\tacme_ca "+private+"\n\tacme_ca_root "+root+"\n") {
		t.Fatalf("deployed Caddyfile (%v):\n%s", err, deployed)
	}
	if st := e.status(t); st.ACMECA != private || st.ACMECARoot != root {
		t.Fatalf("status: %+v", st)
	}
	// An empty acme_ca goes back to Let's Encrypt, named in the file.
	r = e.do(req{method: "PUT", path: "/api/local/acme", body: `{"acme_ca":""}`, cookie: e.cookie})
	if r.Code != 200 || strings.TrimSpace(r.Body.String()) != `{"data":{"acme_ca":"`+localsetup.DefaultACMECA+`","acme_ca_root":""}}` {
		t.Fatalf("clearing: %d %s", r.Code, r.Body)
	}
	if deployed, _ := os.ReadFile(e.setup.Proxy.Path); !strings.Contains(string(deployed), "\tacme_ca "+localsetup.DefaultACMECA+"\n") || strings.Contains(string(deployed), "acme_ca_root") {
		t.Fatalf("deployed after clearing:\n%s", deployed)
	}
	wantError(t, e.do(req{method: "PUT", path: "/api/local/acme", body: `{"acme_ca":""}`}), 401, "authentication required")
}
