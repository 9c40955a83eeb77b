package localsetup_test

import (
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/daemontest"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// TestDatabaseOutage: the state in a real PostgreSQL, a machine with an
// HTTP tunnel behind a password gate through real caddy, frps and frpc.
// The database stops for 60 s: requests through the tunnel and the gate
// keep passing (the plugin and the gate decide from memory), the
// dashboard's writes answer 503 `database unavailable`; once it is back,
// an operator login works within 10 s, with no restart.
func TestDatabaseOutage(t *testing.T) {
	srv, url := testutil.OwnPostgres(t)
	b := newGateBedOn(t, url)

	// The operator's dashboard session (the bed set the password), and a
	// visitor signed in at the gate.
	dash := b.d.Anon(t)
	login := func() (int, string) {
		t.Helper()
		jar, _ := cookiejar.New(nil)
		dash.HTTP.Jar = jar
		return dash.Call("POST", "/api/auth/login", map[string]string{"password": daemontest.Password}, nil)
	}
	if code, body := login(); code != 200 {
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
			t.Fatalf("%s into the outage: %v\n%s", time.Since(down).Round(time.Second), err, b.d.Log.String())
		}
		passed++
		if writes < 3 {
			// A change on the dashboard: refused in words, nothing written.
			code, body := dash.Call("PATCH", fmt.Sprintf("/api/tunnels/%d", b.tunnels["open"].ID), map[string]any{"paused": true}, nil)
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
		if code, body := login(); code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	t.Logf("login worked %s after the database came back", d.Round(time.Millisecond))
	if err := through(); err != nil {
		t.Fatal(err)
	}
	// The write refused during the outage did not happen.
	code, body := dash.Call("GET", fmt.Sprintf("/api/tunnels/%d", b.tunnels["open"].ID), nil, nil)
	if code != 200 || strings.Contains(body, `"paused":true`) {
		t.Fatalf("the open tunnel after the outage: %d %s", code, body)
	}
}
