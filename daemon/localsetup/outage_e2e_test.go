package localsetup_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/pgtest"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// TestDatabaseOutage: the state in a real PostgreSQL, a machine with an
// HTTP tunnel behind a password gate through real caddy, frps and frpc.
// The database stops for 60 s: requests through the tunnel and the gate
// keep passing (the plugin and the gate decide from memory), the
// dashboard's writes answer 503 `database unavailable`; once it is back,
// an operator login works within 10 s, with no restart.
func TestDatabaseOutage(t *testing.T) {
	srv, err := pgtest.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	url, err := srv.NewDatabase()
	if err != nil {
		t.Fatal(err)
	}
	b := newGateBedOn(t, url)

	// The operator's dashboard session, and a visitor signed in at the gate.
	jar, _ := cookiejar.New(nil)
	dash := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	call := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, b.dash+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := dash.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	const password = "Lantern-Orchid-Harbor-71"
	if code, body := call("POST", "/api/auth/setup", `{"password":"`+password+`"}`); code != 200 {
		t.Fatalf("setup: %d %s", code, body)
	}
	if code, body := call("POST", "/api/auth/login", `{"password":"`+password+`"}`); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	a := b.do("", "POST", "pw.example.test", "/.tunnelsvc/login", nil, map[string][]string{"password": {"correct horse battery staple"}, "next": {"/docs/"}})
	cookie := map[string]string{"Cookie": gate.CookieName + "=" + a.gateCookie(t)}
	through := func() error {
		if got := b.do("", "GET", "pw.example.test", "/docs/", cookie, nil); !got.reachedApp() {
			return fmt.Errorf("signed in: %d %q", got.status, got.body)
		}
		if got := b.do("", "GET", "open.example.test", "/", nil, nil); !got.reachedApp() {
			return fmt.Errorf("public: %d %q", got.status, got.body)
		}
		if got := b.do("", "GET", "pw.example.test", "/docs/", nil, nil); got.status != http.StatusFound || got.reachedApp() {
			return fmt.Errorf("a visitor without a session: %d %q", got.status, got.body)
		}
		return nil
	}
	if err := through(); err != nil {
		t.Fatal(err)
	}

	srv.Halt()
	down := time.Now()
	var writes, passed int
	for time.Since(down) < 60*time.Second {
		if err := through(); err != nil {
			t.Fatalf("%s into the outage: %v\n%s", time.Since(down).Round(time.Second), err, b.log.String())
		}
		passed++
		if writes < 3 {
			// A change on the dashboard: refused in words, nothing written.
			code, body := call("PATCH", fmt.Sprintf("/api/tunnels/%d", b.tunnels["open"].ID), `{"paused":true}`)
			if code != http.StatusServiceUnavailable || !strings.Contains(body, `"database unavailable"`) {
				t.Fatalf("a write while the database is gone: %d %s", code, body)
			}
			writes++
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("60 s without the database: %d rounds through the gate and the tunnel passed; writes answered 503", passed)

	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	d := testutil.Eventually(t, 10*time.Second, "an operator login", func() error {
		fresh, _ := cookiejar.New(nil)
		dash.Jar = fresh
		if code, body := call("POST", "/api/auth/login", `{"password":"`+password+`"}`); code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	t.Logf("login worked %s after the database came back", d.Round(time.Millisecond))
	if err := through(); err != nil {
		t.Fatal(err)
	}
	// The write refused during the outage did not happen.
	code, body := call("GET", fmt.Sprintf("/api/tunnels/%d", b.tunnels["open"].ID), "")
	if code != 200 || strings.Contains(body, `"paused":true`) {
		t.Fatalf("the open tunnel after the outage: %d %s", code, body)
	}
}
