package api

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
)

// When caddy refuses a Caddyfile because of a file it was told to import
// (here by the operator's own custom block), the API client sees where the
// error is, never the other file's lines.
func TestCaddyRefusalNeverQuotesOtherFiles(t *testing.T) {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Skip("caddy is not installed (scripts/install-deps.sh installs it)")
	}
	e := newLocalEnv(t, nil)
	ctx := context.Background()
	// The proxy counts as installed, so a bind_ip change redeploys it.
	if err := e.setup.Settings.SaveVPS(ctx, localsetup.VPS{Domain: "example.com", ServerHost: "router.example.com", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret.conf")
	if err := os.WriteFile(secret, []byte("s3cr3t-first-line abc\nanother-s3cr3t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	deployed, err := e.setup.ProxyFile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	withImport := strings.Replace(string(deployed), "# ===== END CUSTOM", "import "+secret+"\n# ===== END CUSTOM", 1)
	if err := os.MkdirAll(filepath.Dir(e.setup.Proxy.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.setup.Proxy.Path, []byte(withImport), 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.do(req{method: "PUT", path: "/api/local/bind-ip", body: `{"bind_ip":"203.0.113.5"}`, cookie: e.cookie})
	if r.Code/100 != 4 && r.Code/100 != 5 {
		t.Fatalf("caddy accepted a file that imports garbage: %d %s", r.Code, r.Body)
	}
	msg, _ := r.json(t)["error"].(string)
	if strings.Contains(msg, "s3cr3t") || strings.Contains(msg, "\n") {
		t.Fatalf("the API answer carries the imported file's contents or several lines: %q", msg)
	}
	t.Logf("the API said: %s", msg)
	if !strings.Contains(msg, secret) {
		t.Fatalf("the answer does not say which file caddy refused: %q", msg)
	}
	if st := e.status(t); st.BindIP != "" {
		t.Fatalf("bind_ip stayed %q after caddy refused it", st.BindIP)
	}
	if got, _ := os.ReadFile(e.setup.Proxy.Path); string(got) != withImport {
		t.Fatalf("the deployed Caddyfile changed although caddy refused the new one")
	}
}

// The same through the log WebSocket: an install whose Caddyfile caddy
// refuses streams caddy's location, not the other file's lines.
func TestInstallLogNeverQuotesOtherFiles(t *testing.T) {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Skip("caddy is not installed (scripts/install-deps.sh installs it)")
	}
	e := newLocalEnv(t, nil)
	secret := filepath.Join(t.TempDir(), "secret.conf")
	if err := os.WriteFile(secret, []byte("s3cr3t-first-line abc\nanother-s3cr3t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A deployed file whose custom block imports the other file.
	if err := os.MkdirAll(filepath.Dir(e.setup.Proxy.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	deployed := "# ===== BEGIN CUSTOM CONFIGURATION =====\nimport " + secret + "\n# ===== END CUSTOM CONFIGURATION =====\n"
	if err := os.WriteFile(e.setup.Proxy.Path, []byte(deployed), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(checkedHandler(t, e.srv))
	defer srv.Close()
	ws, _, err := dialLogs(t, srv, e.cookie, "")
	if err != nil {
		t.Fatal(err)
	}
	if r := e.do(req{method: "POST", path: "/api/local/install", body: `{"domain":"example.com"}`, cookie: e.cookie}); r.Code != 200 {
		t.Fatalf("install: %d %s", r.Code, r.Body)
	}
	lines, ok := readUntilDone(t, ws)
	all := strings.Join(lines, "\n")
	if ok || !strings.Contains(all, secret+" line 2") {
		t.Fatalf("the refusal is not reported with its location: ok=%v\n%s", ok, all)
	}
	if strings.Contains(all, "s3cr3t") || strings.Contains(all, `"level"`) || strings.Contains(all, "Did you mean") {
		t.Fatalf("the log stream carries more than caddy's message line:\n%s", all)
	}
}
