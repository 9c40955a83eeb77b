package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
)

// updSys is a machine that can take updates: it records what apply-update
// was given on stdin.
type updSys struct {
	fakeSys
	mu        sync.Mutex
	header    string
	bundle    []byte
	applies   int
	confirms  int
	applyErr  error
	applyGate chan struct{} // when set, apply-update waits for it
}

func (f *updSys) ApplyUpdate(_ context.Context, stdin io.Reader) error {
	if f.applyGate != nil {
		<-f.applyGate
	}
	br := bufio.NewReader(stdin)
	line, _ := br.ReadString('\n')
	rest, _ := io.ReadAll(br)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applies++
	f.header, f.bundle = line, rest
	return f.applyErr
}

func (f *updSys) ConfirmUpdate(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.confirms++
	return nil
}

func (f *updSys) applied() (int, string, []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applies, f.header, f.bundle
}

func newUpdateServer(t *testing.T, lib, version string) (*agent.Server, *updSys) {
	t.Helper()
	sys := &updSys{fakeSys: fakeSys{state: map[string]string{"ActiveState": "active", "SubState": "running"}}}
	return &agent.Server{Token: token, Unit: "revtunnel-client.service", Version: version, Sys: sys, Lib: lib,
		TempDir: t.TempDir(), Later: func(f func()) { f() }}, sys
}

// do sends a signed request as the daemon does.
func do(t *testing.T, srv *agent.Server, method, path, body string) (int, string) {
	t.Helper()
	req, _ := signed(method, path, body, token, challenge(t, srv, token))
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func getStatus(t *testing.T, srv *agent.Server) agent.Status {
	t.Helper()
	code, body := do(t, srv, "GET", "/status", "")
	var st agent.Status
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("GET /status: %d %s", code, body)
	}
	return st
}

// waitUpdate polls GET /status until the update reaches state.
func waitUpdate(t *testing.T, srv *agent.Server, state string) agent.UpdateState {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := getStatus(t, srv)
		if st.Update != nil && st.Update.State == state {
			return *st.Update
		}
		if time.Now().After(deadline) {
			t.Fatalf("update never became %q: %+v", state, st.Update)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitEmpty waits until the downloaded bundle is removed from dir (after
// the update's outcome is set).
func waitEmpty(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ents, _ := os.ReadDir(dir)
		if len(ents) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the downloaded bundle was left: %v", ents)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func serveBundle(t *testing.T, bundle []byte) string {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/static/bundles/machine-linux-amd64.tar.gz" {
			http.NotFound(w, r)
			return
		}
		w.Write(bundle)
	}))
	t.Cleanup(hs.Close)
	return hs.URL + "/static/bundles/machine-linux-amd64.tar.gz"
}

func updateBody(version, url, sha string, size int) string {
	return fmt.Sprintf(`{"version":%q,"url":%q,"sha256":%q,"size":%d}`, version, url, sha, size)
}

func TestStatusUpdateFields(t *testing.T) {
	lib := t.TempDir()
	srv, _ := newUpdateServer(t, lib, "A")
	code, body := do(t, srv, "GET", "/status", "")
	want := `"capabilities":["update","speedtest"],"arch":"` + runtime.GOARCH + `","bundle_version":"A"}`
	if code != 200 || !strings.Contains(body, want) {
		t.Fatalf("a machine never updated: %d %s, want %s (no \"update\")", code, body, want)
	}

	writeFile(t, filepath.Join(lib, "bundle-version"), "B\n")
	writeFile(t, filepath.Join(lib, "update-state"), "state=current\nversion=B\nerror=\nat=2026-01-02T03:04:05Z\n")
	if _, body := do(t, srv, "GET", "/status", ""); !strings.Contains(body, `"bundle_version":"B","update":{"state":"current","version":"B","at":"2026-01-02T03:04:05Z"}`) {
		t.Fatalf("an updated machine: %s", body)
	}

	// An agent whose machine cannot take updates says so, and refuses.
	old := &agent.Server{Token: token, Unit: "revtunnel-client.service", Version: "A", Sys: &fakeSys{}, Lib: lib}
	if _, body := do(t, old, "GET", "/status", ""); !strings.Contains(body, `"capabilities":["speedtest"]`) {
		t.Fatalf("no update capability: %s", body)
	}
	if code, body := do(t, old, "POST", "/update", updateBody("B", "https://x/b.tar.gz", strings.Repeat("a", 64), 10)); code != 501 {
		t.Fatalf("POST /update without updates: %d %s", code, body)
	}
}

func TestPostUpdate(t *testing.T) {
	bundle := makeBundle(t, bundleEntries("B", "client 0.65"))
	url := serveBundle(t, bundle)
	good := sum(bundle)

	t.Run("good bundle is handed to apply-update", func(t *testing.T) {
		srv, sys := newUpdateServer(t, t.TempDir(), "A")
		code, body := do(t, srv, "POST", "/update", updateBody("B", url, good, len(bundle)))
		if code != 202 || !strings.Contains(body, `"message":"downloading bundle B (`) {
			t.Fatalf("%d %s", code, body)
		}
		deadline := time.Now().Add(10 * time.Second)
		for n, _, _ := sys.applied(); n == 0; n, _, _ = sys.applied() {
			if time.Now().After(deadline) {
				t.Fatalf("apply-update never ran: %+v", getStatus(t, srv).Update)
			}
			time.Sleep(10 * time.Millisecond)
		}
		_, header, got := sys.applied()
		if want := fmt.Sprintf(`{"version":"B","sha256":"%s","size":%d}`+"\n", good, len(bundle)); header != want || string(got) != string(bundle) {
			t.Fatalf("apply-update stdin: %q + %d bytes, want %q + the bundle", header, len(got), want)
		}
		if st := waitUpdate(t, srv, "applying"); st.Version != "B" || st.Error != "" {
			t.Fatalf("%+v", st)
		}
		waitEmpty(t, srv.TempDir)
	})

	for _, c := range []struct {
		name, sha, url string
		size           int
		want           string
	}{
		{name: "wrong SHA-256", sha: strings.Repeat("0", 64), size: len(bundle),
			want: "bundle refused: SHA-256 mismatch (expected " + strings.Repeat("0", 64) + ", got " + good + "); nothing was changed"},
		{name: "smaller than served", sha: good, size: len(bundle) - 1,
			want: fmt.Sprintf("bundle refused: size mismatch (expected %d bytes, got more); nothing was changed", len(bundle)-1)},
		{name: "larger than served", sha: good, size: len(bundle) + 5,
			want: fmt.Sprintf("bundle refused: size mismatch (expected %d bytes, got %d); nothing was changed", len(bundle)+5, len(bundle))},
		{name: "not found", sha: good, size: len(bundle), url: strings.Replace(url, "amd64", "mips", 1),
			want: "answered 404 Not Found; nothing was changed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, sys := newUpdateServer(t, t.TempDir(), "A")
			u := url
			if c.url != "" {
				u = c.url
			}
			if code, body := do(t, srv, "POST", "/update", updateBody("B", u, c.sha, c.size)); code != 202 {
				t.Fatalf("%d %s", code, body)
			}
			st := waitUpdate(t, srv, "failed")
			if !strings.Contains(st.Error, c.want) || st.Version != "B" {
				t.Fatalf("error %q, want %q", st.Error, c.want)
			}
			if n, _, _ := sys.applied(); n != 0 {
				t.Fatal("apply-update ran on a refused bundle")
			}
			waitEmpty(t, srv.TempDir)
		})
	}

	t.Run("apply-update fails in its own words", func(t *testing.T) {
		srv, sys := newUpdateServer(t, t.TempDir(), "A")
		sys.applyErr = &agent.ToolError{Op: "apply-update", Output: "bundle refused: visudo refused its sudo rules: syntax error; nothing was changed", Err: errors.New("exit status 1")}
		do(t, srv, "POST", "/update", updateBody("B", url, good, len(bundle)))
		if st := waitUpdate(t, srv, "failed"); st.Error != "apply-update: bundle refused: visudo refused its sudo rules: syntax error; nothing was changed" {
			t.Fatalf("%q", st.Error)
		}
	})

	t.Run("409 while an update runs", func(t *testing.T) {
		srv, sys := newUpdateServer(t, t.TempDir(), "A")
		sys.applyGate = make(chan struct{})
		if code, body := do(t, srv, "POST", "/update", updateBody("B", url, good, len(bundle))); code != 202 {
			t.Fatalf("%d %s", code, body)
		}
		waitUpdate(t, srv, "applying")
		code, body := do(t, srv, "POST", "/update", updateBody("B", url, good, len(bundle)))
		close(sys.applyGate)
		if code != 409 || !strings.Contains(body, "an update is already running") {
			t.Fatalf("second update: %d %s", code, body)
		}
		// Once it ended, the next one may start.
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, body = do(t, srv, "POST", "/update", updateBody("B", url, good, len(bundle)))
			if code == 202 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("still refused: %d %s", code, body)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// The second one ends before the test removes its directories.
		for n, _, _ := sys.applied(); n < 2; n, _, _ = sys.applied() {
			if time.Now().After(deadline) {
				t.Fatalf("the second update never reached apply-update")
			}
			time.Sleep(10 * time.Millisecond)
		}
		waitEmpty(t, srv.TempDir)
	})

	t.Run("bad bodies", func(t *testing.T) {
		srv, sys := newUpdateServer(t, t.TempDir(), "A")
		for body, want := range map[string]string{
			`{`:                                     "bad body",
			updateBody("", url, good, 10):           `"version" is required`,
			updateBody("B;rm -rf /", url, good, 10): "is not a bundle version",
			updateBody("B", "", good, 10):           `"url" is required`,
			updateBody("B", "file:///etc/passwd", good, 10):               "is not an absolute http(s) URL",
			updateBody("B", url, "abc", 10):                               "is not 64 lowercase hex digits",
			updateBody("B", url, good, -1):                                "size -1 is not between 1 and 268435456 bytes",
			updateBody("B", url, good, agent.MaxBundleBytes+1):            "is not between 1 and",
			`{"version":"B","url":"` + url + `","sha256":"` + good + `"}`: `"size" is required`,
		} {
			code, got := do(t, srv, "POST", "/update", body)
			var ans struct{ Error string }
			if json.Unmarshal([]byte(got), &ans); code != 400 || !strings.Contains(ans.Error, want) {
				t.Errorf("%s: %d %s, want 400 %q", body, code, got, want)
			}
		}
		if n, _, _ := sys.applied(); n != 0 || getStatus(t, srv).Update != nil {
			t.Fatal("a refused request started an update")
		}
	})
}

func TestConfirmRoute(t *testing.T) {
	srv, sys := newUpdateServer(t, t.TempDir(), "B")
	if code, body := do(t, srv, "POST", "/update/confirm", `{"version":"C"}`); code != 409 || !strings.Contains(body, "this agent is version B, not C") {
		t.Fatalf("other version: %d %s", code, body)
	}
	if code, body := do(t, srv, "POST", "/update/confirm", `{}`); code != 400 {
		t.Fatalf("no version: %d %s", code, body)
	}
	if sys.confirms != 0 {
		t.Fatal("confirm-update ran")
	}
	if code, body := do(t, srv, "POST", "/update/confirm", `{"version":"B"}`); code != 200 || !strings.Contains(body, "update to B confirmed") || sys.confirms != 1 {
		t.Fatalf("%d %s (confirms %d)", code, body, sys.confirms)
	}
	if code, _ := do(t, srv, "GET", "/update/confirm", ""); code != 405 {
		t.Fatalf("GET /update/confirm: %d", code)
	}
}
