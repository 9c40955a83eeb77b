// Package pgtest runs a throwaway PostgreSQL: initdb in a temporary
// directory, the server on a Unix socket there, durability off (the data
// dies with it). The tests (testutil.PostgresURL) and the bench
// (tunnelsvc-bench) both use it; neither needs a server set up beforehand,
// only Debian's postgresql package.
package pgtest

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
	"time"

	"github.com/jackc/pgx/v5"
)

// BinDir is where Debian's postgresql package puts the server's programs
// (not on PATH there).
const BinDir = "/usr/lib/postgresql/15/bin"

// Server is a running throwaway PostgreSQL.
type Server struct {
	dir    string // data directory and socket, removed by Stop
	cmd    *exec.Cmd
	exited chan struct{}
	// postgres and cred start the server again after Halt.
	postgres string
	cred     *syscall.Credential

	mu   sync.Mutex
	next int
	stop sync.Once
}

// Start runs initdb and the server in a new directory under parent (the
// system's temporary directory when empty). Under root the server runs as
// the postgres user, which must be able to reach parent: the Unix socket's
// path also has to stay short (about 100 bytes). Without Debian's
// postgresql package it fails, saying to install it.
func Start(parent string) (*Server, error) {
	initdb, err := program("initdb")
	if err != nil {
		return nil, err
	}
	postgres, err := program("postgres")
	if err != nil {
		return nil, err
	}
	// The server refuses to run as root: it runs as the postgres user,
	// which owns the directory.
	var cred *syscall.Credential
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs the postgres user (Debian's postgresql package creates it): %v", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	dir, err := os.MkdirTemp(parent, "tunnelsvc-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir}
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		return nil, err
	}
	if cred != nil {
		for _, p := range []string{dir, data} {
			if err := os.Chown(p, uid, gid); err != nil {
				return nil, err
			}
		}
	}
	run := exec.Command(initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	run.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := run.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	s.postgres, s.cred = postgres, cred
	if err := s.launch(); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// launch starts the server on the data directory and waits until it
// accepts connections.
func (s *Server) launch() error {
	data := filepath.Join(s.dir, "data")
	cmd := exec.Command(s.postgres, "-D", data, "-k", s.dir, "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "log_min_messages=fatal")
	// Dies with the process that started it, should that be killed before
	// it calls Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start postgres: %v", err)
	}
	exited := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	go func() { cmd.Wait(); log.Close(); close(exited) }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.url("postgres"))
		if err == nil {
			conn.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		select {
		case <-exited:
			out, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			return fmt.Errorf("postgres exited at start:\n%s", strings.TrimSpace(string(out)))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within 30 s: %v", err)
		}
	}
}

// Halt stops the server as an outage would (a fast shutdown: every
// connection is cut), keeping its data for Resume.
func (s *Server) Halt() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
}

// Resume starts the halted server again on the same data and socket.
func (s *Server) Resume() error { return s.launch() }

// NewDatabase creates a new, empty database and returns its URL.
func (s *Server) NewDatabase() (string, error) { return s.NewDatabaseFrom("") }

// NewDatabaseFrom creates a new database, a copy of the database template
// when it is not empty (CREATE DATABASE ... TEMPLATE: much faster than
// migrating again), and returns its URL.
func (s *Server) NewDatabaseFrom(template string) (string, error) {
	s.mu.Lock()
	s.next++
	name := fmt.Sprintf("t_%d", s.next)
	s.mu.Unlock()
	return s.CreateDatabase(name, template)
}

// CreateDatabase creates the database name, a copy of template if given,
// and returns its URL. PostgreSQL waits a few seconds for the template's
// last connections to go before it refuses the copy.
func (s *Server) CreateDatabase(name, template string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	q := "CREATE DATABASE " + name
	if template != "" {
		q += " TEMPLATE " + template
	}
	// A file copy of a small template (a test's database, a few MB) takes
	// half the CPU of PostgreSQL 15's default, which writes every page of
	// it to the WAL; its checkpoints cost nothing with fsync off.
	q += " STRATEGY FILE_COPY"
	if _, err := conn.Exec(ctx, q); err != nil {
		return "", fmt.Errorf("create database %s: %v", name, err)
	}
	return s.url(name), nil
}

func (s *Server) url(db string) string {
	return "postgres://postgres@/" + db + "?host=" + s.dir + "&sslmode=disable"
}

// Pid is the server's (the postmaster's) process id.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process.Pid
}

// Stop stops the server (a fast shutdown: SIGINT) and removes its files.
// It may be called more than once.
func (s *Server) Stop() {
	s.stop.Do(func() {
		s.mu.Lock()
		cmd, exited := s.cmd, s.exited
		s.mu.Unlock()
		if cmd != nil {
			cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-exited
			}
		}
		os.RemoveAll(s.dir)
	})
}

// program finds a PostgreSQL program: Debian's directory first, then PATH.
func program(name string) (string, error) {
	if p := filepath.Join(BinDir, name); isExecutable(p) {
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found in %s or on PATH: install Debian's postgresql package (scripts/install-deps.sh does)", name, BinDir)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
