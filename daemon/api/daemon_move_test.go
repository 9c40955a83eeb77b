package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// TestMoveAnInstallToPostgreSQL follows docs/database.md: a SQLite
// install with 2FA, an SSH key, a machine and a tunnel is stopped, copied
// into PostgreSQL with CopyDatabase, and started again on it with the same
// data directory (the sealing key). The operator logs in with the same
// password and a code from the same authenticator, the keys are the same,
// the machine's tunnel client is let in by the tunnel server with the
// credential it holds, and its config still renders (its sealed secret
// opens).
func TestMoveAnInstallToPostgreSQL(t *testing.T) {
	noSystemd := app.Deps{Units: units.Unavailable{}}
	var dataDir string
	old := newWiredDaemonWith(t, func(c *config.Config) { dataDir = c.DataDir }, noSystemd)
	old.call("POST", "/api/auth/setup", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	old.call("POST", "/api/auth/login", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	var enrol struct {
		Secret string `json:"secret"`
	}
	old.call("POST", "/api/auth/2fa/enroll", "", http.StatusOK, &enrol)
	code, _ := totp.GenerateCode(enrol.Secret, time.Now())
	old.call("POST", "/api/auth/2fa/confirm", fmt.Sprintf(`{"code":%q,"name":"phone"}`, code), http.StatusOK, nil)
	var key struct {
		Fingerprint string `json:"fingerprint"`
	}
	old.call("POST", "/api/local/ssh-keys/generate", `{"name":"ops","set_default":true}`, http.StatusOK, &key)
	id, _ := old.join("nas")
	old.call("POST", "/api/tunnels", fmt.Sprintf(`{"machine_id":%d,"name":"db","kind":"tcp","local_port":5432}`, id), http.StatusCreated, nil)
	config0 := clientConfig(t, old, id)
	user := regexp.MustCompile(`(?m)^user = '([^']+)'`).FindStringSubmatch(config0)[1]
	secret := regexp.MustCompile(`(?m)^token = '([^']+)'`).FindStringSubmatch(config0)[1]
	var tunnelsBefore, keysBefore string
	tunnelsBefore = tunnelRows(t, old)
	keysBefore = raw(t, old, "/api/local/ssh-keys")
	// Stop.
	old.srv.Close()
	old.a.Close()

	// Copy, set the URL, start.
	url := testutil.PostgresURL(t)
	tables, err := app.CopyDatabase(context.Background(), dataDir, "", url)
	if err != nil {
		t.Fatal(err)
	}
	var rows int64
	for _, tc := range tables {
		rows += tc.Rows
	}
	t.Logf("copied %d rows in %d tables", rows, len(tables))
	moved := newWiredDaemonWith(t, func(c *config.Config) { c.DataDir, c.Database = dataDir, url }, noSystemd)
	if got := moved.a.Store.Engine(); got != "postgres" {
		t.Fatalf("engine %q", got)
	}

	// The same password, then a code from the same authenticator.
	var login struct {
		Needs2FA     bool   `json:"needs_2fa"`
		PendingToken string `json:"pending_token"`
	}
	moved.call("POST", "/api/auth/login", `{"password":"correct horse battery staple"}`, http.StatusOK, &login)
	if !login.Needs2FA || login.PendingToken == "" {
		t.Fatalf("login after the move: %+v", login)
	}
	next, _ := totp.GenerateCode(enrol.Secret, time.Now().Add(30*time.Second))
	moved.call("POST", "/api/auth/login/2fa", fmt.Sprintf(`{"pending_token":%q,"code":%q}`, login.PendingToken, next), http.StatusOK, nil)
	if got := raw(t, moved, "/api/local/ssh-keys"); got != keysBefore || !strings.Contains(got, key.Fingerprint) {
		t.Fatalf("keys after the move:\n%s\nbefore:\n%s", got, keysBefore)
	}
	if got := tunnelRows(t, moved); got != tunnelsBefore {
		t.Fatalf("tunnels after the move:\n%s\nbefore:\n%s", got, tunnelsBefore)
	}
	// The tunnel server lets the machine in with the credential it holds.
	rec := httptest.NewRecorder()
	body := fmt.Sprintf(`{"version":"0.1.0","op":"Login","content":{"user":%q,"metas":{"token":%q},"client_address":"127.0.0.1:40000"}}`, user, secret)
	req := httptest.NewRequest("POST", frpconf.PluginPath+"?op=Login", strings.NewReader(body))
	req.RemoteAddr = "127.0.0.1:5555" // frps, on this server
	moved.a.Plugin.ServeHTTP(rec, req)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"reject":false`) {
		t.Fatalf("the machine's login after the move: %d %s", rec.Code, rec.Body)
	}
	if got := clientConfig(t, moved, id); got != config0 {
		t.Fatalf("the machine's config after the move differs:\n%s\nbefore:\n%s", got, config0)
	}
}

// clientConfig is the machine's rendered client config.
func clientConfig(t *testing.T, d *wiredDaemon, id int64) string {
	t.Helper()
	cfg, err := d.a.Machines.ClientConfig(context.Background(), id, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// raw is the body of a GET.
func raw(t *testing.T, d *wiredDaemon, path string) string {
	t.Helper()
	var out any
	d.call("GET", path, "", http.StatusOK, &out)
	return fmt.Sprint(out)
}

// tunnelRows is what the operator made of each tunnel (not its live state,
// which follows the machine's connection).
func tunnelRows(t *testing.T, d *wiredDaemon) string {
	t.Helper()
	var ts []struct {
		ID         int64  `json:"id"`
		MachineID  int64  `json:"machine_id"`
		Name       string `json:"name"`
		Kind       string `json:"kind"`
		LocalPort  int    `json:"local_port"`
		RemotePort int    `json:"remote_port"`
		CreatedAt  string `json:"created_at"`
	}
	d.call("GET", "/api/tunnels", "", http.StatusOK, &ts)
	return fmt.Sprintf("%+v", ts)
}
