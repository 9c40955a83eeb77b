package main

// Black-box tests: build the real binary, start it on a free loopback port
// with temporary directories, and drive it over real HTTP.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"

	"github.com/tunnelsvc/tunnelsvc/daemon/api"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/apicheck"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds tunnelsvc once per test run.
func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tunnelsvc-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "tunnelsvc")
		// As make builds it: -trimpath lets Go's build cache serve a new
		// clone (without it every package compiles again there).
		out, err := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	// In-process tests hash cheaply; the built binary keeps the real cost.
	auth.LowCostForTests()
	code := testutil.RunWithPostgres(m)
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

type daemonProc struct {
	cmd     *exec.Cmd
	base    string
	dataDir string
	mu      sync.Mutex
	log     strings.Builder
	// logDone is closed once every line of the daemon's stderr is in log.
	logDone chan struct{}
}

func (d *daemonProc) logText() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// startDaemon runs `tunnelsvc serve` on 127.0.0.1:0 and waits until it says
// where it listens.
func startDaemon(t testing.TB, extra ...string) *daemonProc {
	t.Helper()
	return startDaemonIn(t, t.TempDir(), extra...)
}

// startDaemonIn is startDaemon with the data directory at dataDir.
func startDaemonIn(t testing.TB, dataDir string, extra ...string) *daemonProc {
	t.Helper()
	d := &daemonProc{dataDir: dataDir, logDone: make(chan struct{})}
	// No listener on a fixed port: the plugin's default 127.0.0.1:7381 was
	// at times held by another test process running in parallel.
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", d.dataDir, "--system-root", t.TempDir(), "--gate-listen", "127.0.0.1:0",
		"--frps-plugin-listen", fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}, extra...)
	d.cmd = exec.Command(binary(t), args...)
	d.cmd.Env = append(os.Environ(), "NOTIFY_SOCKET=")
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		d.cmd.Wait()
	})
	addrRe := regexp.MustCompile(`msg="serving the dashboard" addr=(\S+)`)
	found := make(chan string, 1)
	go func() {
		defer close(d.logDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			d.mu.Lock()
			d.log.WriteString(line + "\n")
			d.mu.Unlock()
			if m := addrRe.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case addr := <-found:
		d.base = "http://" + addr
	case <-time.After(15 * time.Second):
		t.Fatalf("daemon did not start; log:\n%s", d.logText())
	}
	return d
}

// apiDoc is daemon/api/openapi.yaml, loaded once: every answer call gets is
// held against it.
var apiDoc = sync.OnceValues(func() (*apicheck.Checker, error) { return apicheck.New(api.OpenAPIDocument()) })

type result struct {
	status int
	header http.Header
	body   map[string]any
}

func call(t *testing.T, c *http.Client, method, url, body string, hdr map[string]string) result {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := result{status: resp.StatusCode, header: resp.Header}
	raw, _ := io.ReadAll(resp.Body)
	doc, err := apiDoc()
	if err != nil {
		t.Fatal(err)
	}
	doc.Report(t, req, resp.StatusCode, resp.Header, raw)
	if err := json.Unmarshal(raw, &r.body); err != nil {
		t.Fatalf("%s %s: body %q is not JSON", method, url, raw)
	}
	return r
}

func data(r result) map[string]any { m, _ := r.body["data"].(map[string]any); return m }

const password = "correct horse battery staple"

// TestSessionFlow drives status → setup → status → protected route → logout
// → protected route over real HTTP and checks every cookie attribute.
func TestSessionFlow(t *testing.T) {
	d := startDaemon(t)
	c := &http.Client{Timeout: 10 * time.Second}

	r := call(t, c, "GET", d.base+"/api/auth/status", "", nil)
	if r.status != 200 || data(r)["setup"] != false || data(r)["authenticated"] != false || data(r)["totp_enabled"] != false {
		t.Fatalf("fresh status: %d %v", r.status, r.body)
	}
	if r := call(t, c, "GET", d.base+"/healthz", "", nil); r.status != 200 {
		t.Fatalf("healthz %d", r.status)
	}

	r = call(t, c, "POST", d.base+"/api/auth/setup", `{"password":"`+password+`"}`, nil)
	if r.status != 200 || data(r)["message"] != "setup complete" {
		t.Fatalf("setup: %d %v", r.status, r.body)
	}
	setCookie := r.header.Get("Set-Cookie")
	m := regexp.MustCompile(`^tunnel_session=([A-Za-z0-9_-]{43}); Path=/; Max-Age=86400; HttpOnly; SameSite=Lax$`).FindStringSubmatch(setCookie)
	if m == nil {
		t.Fatalf("setup Set-Cookie = %q", setCookie)
	}
	session := map[string]string{"Cookie": "tunnel_session=" + m[1]}

	r = call(t, c, "GET", d.base+"/api/auth/status", "", session)
	if data(r)["setup"] != true || data(r)["authenticated"] != true {
		t.Fatalf("status after setup: %v", r.body)
	}
	if r := call(t, c, "POST", d.base+"/api/auth/setup", `{"password":"`+password+`"}`, nil); r.status != 409 || r.body["error"] != "already configured" {
		t.Fatalf("second setup: %d %v", r.status, r.body)
	}
	if r := call(t, c, "GET", d.base+"/api/security/logs", "", nil); r.status != 401 || r.body["error"] != "authentication required" {
		t.Fatalf("logs without session: %d %v", r.status, r.body)
	}

	// A fresh login over a proxy that says https gets a Secure cookie.
	r = call(t, c, "POST", d.base+"/api/auth/login", `{"password":"`+password+`"}`, map[string]string{"X-Forwarded-Proto": "https"})
	if r.status != 200 || !regexp.MustCompile(`^tunnel_session=[A-Za-z0-9_-]{43}; Path=/; Max-Age=86400; HttpOnly; Secure; SameSite=Lax$`).MatchString(r.header.Get("Set-Cookie")) {
		t.Fatalf("login: %d %q", r.status, r.header.Get("Set-Cookie"))
	}

	r = call(t, c, "GET", d.base+"/api/security/logs", "", session)
	if r.status != 200 {
		t.Fatalf("logs: %d %v", r.status, r.body)
	}
	entries, _ := r.body["data"].([]any)
	if len(entries) != 2 || entries[0].(map[string]any)["kind"] != "LOGIN_SUCCESS" || entries[1].(map[string]any)["kind"] != "SETUP" {
		t.Fatalf("audit: %v", entries)
	}

	r = call(t, c, "POST", d.base+"/api/auth/logout", "", session)
	if r.status != 200 || data(r)["message"] != "logged out" {
		t.Fatalf("logout: %d %v", r.status, r.body)
	}
	if got := r.header.Get("Set-Cookie"); got != "tunnel_session=; Path=/; Max-Age=-1; HttpOnly; SameSite=Lax" {
		t.Fatalf("logout Set-Cookie = %q", got)
	}
	if r := call(t, c, "GET", d.base+"/api/security/logs", "", session); r.status != 401 {
		t.Fatalf("session survived logout: %d", r.status)
	}
	if r := call(t, c, "GET", d.base+"/api/auth/status", "", session); data(r)["authenticated"] != false {
		t.Fatalf("status after logout: %v", r.body)
	}
}

func TestRateLimit(t *testing.T) {
	d := startDaemon(t)
	c := &http.Client{Timeout: 10 * time.Second}
	call(t, c, "POST", d.base+"/api/auth/setup", `{"password":"`+password+`"}`, nil)
	for i := 0; i < 10; i++ {
		if r := call(t, c, "POST", d.base+"/api/auth/login", `{"password":"wrong"}`, nil); r.status != 401 || r.body["error"] != "invalid password" {
			t.Fatalf("attempt %d: %d %v", i+1, r.status, r.body)
		}
	}
	r := call(t, c, "POST", d.base+"/api/auth/login", `{"password":"`+password+`"}`, nil)
	if r.status != 429 {
		t.Fatalf("11th attempt: %d %v", r.status, r.body)
	}
	if ra := r.header.Get("Retry-After"); !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(ra) {
		t.Fatalf("Retry-After = %q", ra)
	}
	if msg, _ := r.body["error"].(string); !strings.Contains(msg, "try again later") {
		t.Fatalf("429 message %q", msg)
	}
	// The line reaches d.log through a pipe and the goroutine reading it,
	// which can lag behind the answers.
	testutil.Eventually(t, 10*time.Second, "the ban-tool line in the daemon's log", func() error {
		if !strings.Contains(d.logText(), "auth failure from 127.0.0.1") {
			return fmt.Errorf("not in the log:\n%s", d.logText())
		}
		return nil
	})
}

// TestSetupCodeOffLoopback connects from 127.0.0.2 while only 127.0.0.1
// counts as local.
func TestSetupCodeOffLoopback(t *testing.T) {
	d := startDaemon(t, "--local-nets", "127.0.0.1/32")
	remote := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext,
	}}
	body := `{"password":"` + password + `"}`
	r := call(t, remote, "POST", d.base+"/api/auth/setup", body, nil)
	if r.status != 403 || !strings.Contains(r.body["error"].(string), "tunnelsvc setup-code") {
		t.Fatalf("remote setup without code: %d %v", r.status, r.body)
	}
	out, err := exec.Command(binary(t), "setup-code", "--data-dir", d.dataDir).Output()
	if err != nil {
		t.Fatal(err)
	}
	code := strings.TrimSpace(string(out))
	if !regexp.MustCompile(`^[A-Z2-9]{4}-[A-Z2-9]{4}-[A-Z2-9]{4}$`).MatchString(code) || !strings.Contains(d.logText(), "setup_code="+code) {
		t.Fatalf("setup-code printed %q; the daemon logged:\n%s", code, d.logText())
	}
	if r := call(t, remote, "POST", d.base+"/api/auth/setup", body, map[string]string{"X-Setup-Code": "AAAA-BBBB-CCCC"}); r.status != 403 {
		t.Fatalf("wrong code: %d", r.status)
	}
	r = call(t, remote, "POST", d.base+"/api/auth/setup", body, map[string]string{"X-Setup-Code": code})
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Set-Cookie"), "tunnel_session=") {
		t.Fatalf("remote setup with code: %d %v", r.status, r.body)
	}
}

func TestResetPasswordWhileRunning(t *testing.T) {
	d := startDaemon(t)
	c := &http.Client{Timeout: 10 * time.Second}
	r := call(t, c, "POST", d.base+"/api/auth/setup", `{"password":"`+password+`"}`, nil)
	old := map[string]string{"Cookie": strings.SplitN(r.header.Get("Set-Cookie"), ";", 2)[0]}

	run := func(stdin string) (string, error) {
		cmd := exec.Command(binary(t), "reset-password", "--data-dir", d.dataDir)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("short\n"); err == nil || !strings.Contains(out, "at least 8 characters") {
		t.Fatalf("weak password accepted: %v %s", err, out)
	}
	if r := call(t, c, "GET", d.base+"/api/security/logs", "", old); r.status != 200 {
		t.Fatal("a refused reset ended the session")
	}
	newPW := "sturdy lantern orbit violin"
	if out, err := run(newPW + "\n"); err != nil {
		t.Fatalf("reset: %v %s", err, out)
	}
	if r := call(t, c, "GET", d.base+"/api/security/logs", "", old); r.status != 401 {
		t.Fatalf("old session survived the reset: %d", r.status)
	}
	if r := call(t, c, "POST", d.base+"/api/auth/login", `{"password":"`+password+`"}`, nil); r.status != 401 {
		t.Fatalf("old password still works: %d", r.status)
	}
	if r := call(t, c, "POST", d.base+"/api/auth/login", `{"password":"`+newPW+`"}`, nil); r.status != 200 {
		t.Fatalf("new password: %d %v", r.status, r.body)
	}
}

// TestGracefulStop: SIGTERM lets an in-flight request finish, then the
// process exits 0.
func TestGracefulStop(t *testing.T) {
	d := startDaemon(t)
	c := &http.Client{Timeout: 10 * time.Second}
	if r := call(t, c, "GET", d.base+"/healthz", "", nil); r.status != 200 {
		t.Fatal(r.status)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	// Wait closes the stderr pipe once the daemon has exited, whether or
	// not its last lines ("stopped" among them) have been read: wait for
	// the reader to reach the pipe's end first.
	done := make(chan error, 1)
	go func() { <-d.logDone; done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, d.logText())
		}
	case <-ctx.Done():
		t.Fatal("daemon did not stop within 15 s of SIGTERM")
	}
	if !strings.Contains(d.logText(), "msg=stopped") {
		t.Fatalf("no orderly stop in the log:\n%s", d.logText())
	}
}

func TestVersion(t *testing.T) {
	out, err := exec.Command(binary(t), "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "tunnelsvc ") {
		t.Fatalf("version: %q %v", out, err)
	}
}
