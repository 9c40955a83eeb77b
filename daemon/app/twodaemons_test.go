package app

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// TestTwoDaemonsOnOneDatabase: two daemons on one PostgreSQL database (the
// sealing key copied, as it travels with an install). What one writes,
// the other's cached reads show within 1 s: the settings, the machine
// list, a rename; a session made on one is good on the other.
func TestTwoDaemonsOnOneDatabase(t *testing.T) {
	url := testutil.PostgresURL(t)
	// As Serve builds it on a machine without systemd (the status lists
	// the units).
	noSystemd := Deps{Units: units.Unavailable{}}
	a := newWiredDaemonWith(t, func(c *config.Config) { c.Database = url }, noSystemd)
	a.call("POST", "/api/auth/setup", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	key, err := os.ReadFile(filepath.Join(a.a.Config.DataDir, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	b := newWiredDaemonWith(t, func(c *config.Config) {
		c.Database = url
		if err := os.WriteFile(filepath.Join(c.DataDir, "secret.key"), key, 0o600); err != nil {
			t.Fatal(err)
		}
	}, noSystemd)
	a.call("POST", "/api/auth/login", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	b.cookie = a.cookie
	var st struct {
		Authenticated bool `json:"authenticated"`
	}
	b.call("GET", "/api/auth/status", "", http.StatusOK, &st)
	if !st.Authenticated {
		t.Fatal("a session made on one daemon is not good on the other")
	}

	within := func(what string, check func() error) {
		t.Helper()
		d := testutil.Eventually(t, time.Second, what, check)
		t.Logf("%s: seen by the other daemon after %s", what, d.Round(time.Millisecond))
	}
	// Read first, so that each daemon holds the value in its caches.
	var status struct {
		Domain string `json:"domain"`
	}
	b.call("GET", "/api/local/status", "", http.StatusOK, &status)
	a.call("POST", "/api/local/skip", `{"domain":"one.example.test"}`, http.StatusOK, nil)
	within("the domain set on the first", func() error {
		b.call("GET", "/api/local/status", "", http.StatusOK, &status)
		if status.Domain != "one.example.test" {
			return fmt.Errorf("domain %q", status.Domain)
		}
		return nil
	})

	var list []struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	}
	b.call("GET", "/api/machines", "", http.StatusOK, &list)
	id, _ := a.join("nas")
	within("a machine joined through the first", func() error {
		b.call("GET", "/api/machines", "", http.StatusOK, &list)
		if len(list) != 1 || list[0].ID != id {
			return fmt.Errorf("machines %v", list)
		}
		return nil
	})
	a.call("GET", "/api/machines", "", http.StatusOK, &list)
	b.call("PATCH", fmt.Sprintf("/api/machines/%d", id), `{"name":"nas-renamed"}`, http.StatusOK, nil)
	within("a rename on the second", func() error {
		a.call("GET", "/api/machines", "", http.StatusOK, &list)
		if len(list) != 1 || list[0].Name != "nas-renamed" {
			return fmt.Errorf("machines %v", list)
		}
		return nil
	})
}

// TestLoginLimitsCountAcrossEdges: wrong passwords spread over two edges
// count as one client's: after five on each, the next one on either is
// refused (429) before any password is checked, even the right one.
func TestLoginLimitsCountAcrossEdges(t *testing.T) {
	url := testutil.PostgresURL(t)
	noSystemd := Deps{Units: units.Unavailable{}}
	a := newWiredDaemonWith(t, func(c *config.Config) { c.Database, c.EdgeName = url, "edge-a" }, noSystemd)
	a.call("POST", "/api/auth/setup", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	key, err := os.ReadFile(filepath.Join(a.a.Config.DataDir, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	b := newWiredDaemonWith(t, func(c *config.Config) {
		c.Database, c.EdgeName = url, "edge-b"
		if err := os.WriteFile(filepath.Join(c.DataDir, "secret.key"), key, 0o600); err != nil {
			t.Fatal(err)
		}
	}, noSystemd)
	wrong := `{"password":"not the password at all"}`
	for range auth.MaxFailures / 2 {
		a.call("POST", "/api/auth/login", wrong, http.StatusUnauthorized, nil)
		b.call("POST", "/api/auth/login", wrong, http.StatusUnauthorized, nil)
	}
	b.call("POST", "/api/auth/login", `{"password":"correct horse battery staple"}`, http.StatusTooManyRequests, nil)
	a.call("POST", "/api/auth/login", wrong, http.StatusTooManyRequests, nil)
}
