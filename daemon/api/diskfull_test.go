package api

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// Every server-side failure caused by a full disk answers 507 with where
// and what to do, whatever the handler called it; other failures keep
// their status and words.
func TestDiskFullAnswersOneWay(t *testing.T) {
	e := newEnv(t)
	dir := e.cfg.DataDir
	sqliteFull := sqlite3.Error{Code: sqlite3.ErrFull}
	for _, c := range []struct {
		in         *Error
		status     int
		msg        string
		keepsCause bool
	}{
		{Internal("login failed", fmt.Errorf("create session: %w", sqliteFull)), StatusDiskFull,
			"the data disk is full (" + dir + "): free space on it, then try again", true},
		{Internal("could not handle the token", sqliteFull), StatusDiskFull,
			"the data disk is full (" + dir + "): free space on it, then try again", true},
		{Internal("setup failed", &fs.PathError{Op: "write", Path: filepath.Join(dir, "setup-code"), Err: syscall.ENOSPC}), StatusDiskFull,
			"the data disk is full (" + dir + "): free space on it, then try again", true},
		{Internal("reconcile failed", fmt.Errorf("deploy: %w", &fs.PathError{Op: "write", Path: "/etc/revtunnel/.server.toml.tmp-1", Err: syscall.ENOSPC})), StatusDiskFull,
			"the disk is full (/etc/revtunnel): free space on it, then try again", true},
		{Internal("login failed", errors.New("database is locked")), http.StatusInternalServerError, "login failed", false},
		// A client error stays one, whatever lies behind it.
		{&Error{Status: http.StatusBadRequest, Msg: "bad", Err: sqliteFull}, http.StatusBadRequest, "bad", false},
	} {
		got := e.srv.diskFull(c.in)
		if got.Status != c.status || got.Msg != c.msg || (c.keepsCause && got.Err != c.in.Err) {
			t.Errorf("diskFull(%v) = %d %q (cause %v); want %d %q", c.in, got.Status, got.Msg, got.Err, c.status, c.msg)
		}
	}
}

// The API with its store on a filled tmpfs: /healthz says the disk is
// full, login says so instead of a 500; with the filler gone login works
// and /healthz is ok again, with no restart.
func TestFullDataDisk(t *testing.T) {
	dir := testutil.Tmpfs(t, "8m")
	e := newEnvIn(t, dir, dir)
	e.setup()
	if r := e.do(req{method: "GET", path: "/healthz"}); r.Code != 200 {
		t.Fatalf("healthz before: %d %s", r.Code, r.Body)
	}
	filler := testutil.FillDisk(t, dir)

	wantError(t, e.do(req{method: "GET", path: "/healthz"}), http.StatusServiceUnavailable, "data disk full: "+dir)
	login := req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`}
	wantError(t, e.do(login), StatusDiskFull, "the data disk is full ("+dir+"): free space on it, then try again")

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "healthz after freeing", func() error {
		if r := e.do(req{method: "GET", path: "/healthz"}); r.Code != 200 {
			return fmt.Errorf("%d %s", r.Code, r.Body)
		}
		return nil
	})
	if r := e.do(login); r.Code != 200 {
		t.Fatalf("login after freeing: %d %s", r.Code, r.Body)
	}
}

// A server-side failure because the database could not be reached answers
// 503 `database unavailable`, whatever the handler called it; /healthz says
// `degraded: database unavailable`. Other failures keep their words.
func TestDatabaseGoneAnswersOneWay(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "unix", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		in     *Error
		status int
		msg    string
	}{
		{Internal("could not list the machines", fmt.Errorf("list machines: %w", refused)), http.StatusServiceUnavailable, "database unavailable"},
		{Internal("login failed", fmt.Errorf("create session: %w", driver.ErrBadConn)), http.StatusServiceUnavailable, "database unavailable"},
		{Internal("login failed", errors.New("database is locked")), http.StatusInternalServerError, "login failed"},
		{&Error{Status: http.StatusBadGateway, Msg: "agent not reachable", Err: refused}, http.StatusBadGateway, "agent not reachable"},
	} {
		if got := databaseGone(c.in); got.Status != c.status || got.Msg != c.msg {
			t.Errorf("databaseGone(%v) = %d %q; want %d %q", c.in, got.Status, got.Msg, c.status, c.msg)
		}
	}
	// The daemon on a PostgreSQL server of its own, which then stops.
	srv, url := testutil.OwnPostgres(t)
	dir := t.TempDir()
	e := newEnvWith(t, testDB{dir: dir, url: url}, dir)
	if r := e.do(req{method: "GET", path: "/healthz"}); r.Code != 200 {
		t.Fatalf("healthz: %d %s", r.Code, r.Body)
	}
	srv.Halt()
	wantError(t, e.do(req{method: "GET", path: "/healthz"}), 503, "degraded: database unavailable")
}
