package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A throwaway PostgreSQL for tests: one server per test binary, started at
// the first PostgresURL call, on a Unix socket in a temporary directory,
// with durability off (the data dies with the test). Each call gets a
// database of its own. A package that uses it calls RunWithPostgres from
// its TestMain, which stops the server and removes its files at the end.

// pgBinDir is where Debian's postgresql package puts the server's
// programs (not on PATH there).
const pgBinDir = "/usr/lib/postgresql/15/bin"

var pg struct {
	once      sync.Once
	err       error
	dir       string // data directory and socket, removed at the end
	cmd       *exec.Cmd
	exited    chan struct{}
	mu        sync.Mutex
	next      int
	started   bool
	templates map[string]*pgTemplate
}

// pgTemplate is a database prepared once, which others are copied from.
type pgTemplate struct {
	once sync.Once
	err  error
}

// RunWithPostgres runs the tests, then stops the test PostgreSQL if one
// was started; pass its result to os.Exit.
func RunWithPostgres(m *testing.M) int {
	code := m.Run()
	stopPostgres()
	return code
}

// PostgresURL returns the URL of a new, empty database on the test
// PostgreSQL, starting the server on first use. Without Debian's
// postgresql package the test fails, saying to install it.
func PostgresURL(t testing.TB) string {
	t.Helper()
	pg.once.Do(func() { pg.err = startPostgres() })
	if pg.err != nil {
		t.Fatalf("test PostgreSQL: %v", pg.err)
	}
	pg.mu.Lock()
	pg.next++
	name := fmt.Sprintf("t_%d", pg.next)
	pg.mu.Unlock()
	if err := createDatabase(name, ""); err != nil {
		t.Fatalf("test PostgreSQL: %v", err)
	}
	return databaseURL(name)
}

// PostgresURLFrom returns the URL of a new database that is a copy of the
// template database called template, which prepare fills once per test
// binary, given its URL; prepare must leave no connection to it open.
// Tests that need a database in a known state (migrated, say) get one
// this way faster than by building it each time.
func PostgresURLFrom(t testing.TB, template string, prepare func(url string) error) string {
	t.Helper()
	pg.once.Do(func() { pg.err = startPostgres() })
	if pg.err != nil {
		t.Fatalf("test PostgreSQL: %v", pg.err)
	}
	pg.mu.Lock()
	if pg.templates == nil {
		pg.templates = map[string]*pgTemplate{}
	}
	tpl := pg.templates[template]
	if tpl == nil {
		tpl = &pgTemplate{}
		pg.templates[template] = tpl
	}
	pg.next++
	name := fmt.Sprintf("t_%d", pg.next)
	pg.mu.Unlock()
	tpl.once.Do(func() {
		if tpl.err = createDatabase(template, ""); tpl.err == nil {
			tpl.err = prepare(databaseURL(template))
		}
	})
	if tpl.err != nil {
		t.Fatalf("test PostgreSQL: template %s: %v", template, tpl.err)
	}
	if err := createDatabase(name, template); err != nil {
		t.Fatalf("test PostgreSQL: %v", err)
	}
	return databaseURL(name)
}

// createDatabase creates the database name, a copy of template if given.
// PostgreSQL waits a few seconds for the template's last connections to
// go before it refuses the copy.
func createDatabase(name, template string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	q := "CREATE DATABASE " + name
	if template != "" {
		q += " TEMPLATE " + template
	}
	if _, err := conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("create database %s: %v", name, err)
	}
	return nil
}

func databaseURL(name string) string {
	return "postgres://postgres@/" + name + "?host=" + pg.dir + "&sslmode=disable"
}

func adminURL() string {
	return "postgres://postgres@/postgres?host=" + pg.dir + "&sslmode=disable"
}

// pgProgram finds a PostgreSQL program: Debian's directory first, then PATH.
func pgProgram(name string) (string, error) {
	if p := filepath.Join(pgBinDir, name); isExecutable(p) {
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found in %s or on PATH: install Debian's postgresql package (scripts/install-deps.sh does)", name, pgBinDir)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

func startPostgres() error {
	initdb, err := pgProgram("initdb")
	if err != nil {
		return err
	}
	postgres, err := pgProgram("postgres")
	if err != nil {
		return err
	}
	// The server refuses to run as root: it runs as the postgres user,
	// which owns the directory.
	var cred *syscall.Credential
	var uid, gid int = -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("tests run as root and need the postgres user (Debian's postgresql package creates it): %v", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	dir, err := os.MkdirTemp("", "tunnelsvc-pg-")
	if err != nil {
		return err
	}
	pg.dir = dir
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		return err
	}
	if cred != nil {
		for _, p := range []string{dir, data} {
			if err := os.Chown(p, uid, gid); err != nil {
				return err
			}
		}
	}
	run := exec.Command(initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	run.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := run.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	cmd := exec.Command(postgres, "-D", data, "-k", dir, "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "log_min_messages=fatal")
	// Dies with the test binary, should it be killed before the end.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %v", err)
	}
	pg.cmd, pg.started, pg.exited = cmd, true, make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(pg.exited) }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, adminURL())
		if err == nil {
			conn.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		select {
		case <-pg.exited:
			out, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			return fmt.Errorf("postgres exited at start:\n%s", strings.TrimSpace(string(out)))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within 30 s: %v", err)
		}
	}
}

// stopPostgres stops the server (a fast shutdown: SIGINT) and removes its
// files.
func stopPostgres() {
	if pg.started {
		pg.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-pg.exited:
		case <-time.After(10 * time.Second):
			pg.cmd.Process.Kill()
			<-pg.exited
		}
	}
	if pg.dir != "" {
		os.RemoveAll(pg.dir)
	}
}
