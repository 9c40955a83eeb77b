// Package testutil holds what the end-to-end tests share: free loopback
// ports, an echo server, polling with a deadline, started processes whose
// output is kept for failure reports, and the pinned frp binaries.
package testutil

import (
	"bytes"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/portlock"
)

// FreePort returns a loopback TCP port for a server a test starts (frps,
// Caddy, the daemon), reserved until the test ends: see portlock.Port.
func FreePort(t testing.TB) int {
	t.Helper()
	port, release, err := portlock.Port()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return port
}

// AcceptEach hands each connection l accepts to handle, in the accepting
// goroutine (handle starts its own to serve several at once), until the
// test ends and l is closed.
func AcceptEach(t testing.TB, l net.Listener, handle func(net.Conn)) {
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
}

// EchoServer answers every connection on 127.0.0.1 by echoing what it reads.
func EchoServer(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	AcceptEach(t, l, func(c net.Conn) { go func() { defer c.Close(); io.Copy(c, c) }() })
	return l.Addr().(*net.TCPAddr).Port
}

// Echo sends a line through 127.0.0.1:port and reports whether it came back.
func Echo(port int) error {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	msg := fmt.Sprintf("hello %d\n", mrand.Int())
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != msg {
		return fmt.Errorf("echo returned %q", got)
	}
	return nil
}

// Eventually polls cond until it returns nil or d passes, and returns how
// long it took. It polls every 100 ms for the first 10 s (so a test that
// holds the time taken to a bound of seconds reads it to 0.1 s), every
// 250 ms to 30 s, then every 500 ms: many conditions run a program in a
// testbed host (a shell, nsenter, curl: tens of ms of CPU each), and a
// wait of minutes at 100 ms cost more than what it waited for.
func Eventually(t testing.TB, d time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < d {
		if err = cond(); err == nil {
			return time.Since(start)
		}
		pause := 100 * time.Millisecond
		switch since := time.Since(start); {
		case since >= 30*time.Second:
			pause = 500 * time.Millisecond
		case since >= 10*time.Second:
			pause = 250 * time.Millisecond
		}
		time.Sleep(pause)
	}
	t.Fatalf("%s: not within %v: %v", what, d, err)
	return 0
}

// Proc is a started process whose output is kept for failure reports.
type Proc struct {
	Cmd  *exec.Cmd
	Out  *SyncBuffer
	done chan struct{}
	Err  error
}

// SyncBuffer is a bytes.Buffer safe for a writer and a reader.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Start runs bin; the process is killed at cleanup and its output logged if
// the test failed.
func Start(t testing.TB, name, bin string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Cmd: exec.Command(bin, args...), Out: &SyncBuffer{}, done: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Out, p.Out
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.Err = p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.Out.String())
		}
	})
	return p
}

// Stop kills the process and waits for it.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.Cmd.Process.Kill()
	<-p.done
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Running reports whether the process has not exited.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// WaitListening waits until 127.0.0.1:port accepts connections.
func WaitListening(t testing.TB, port int, d time.Duration) {
	t.Helper()
	Eventually(t, d, fmt.Sprintf("127.0.0.1:%d listening", port), func() error {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err
	})
}

// RepoRoot is the directory holding go.mod and tools/frp.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if exists(filepath.Join(dir, "go.mod")) && exists(filepath.Join(dir, "tools", "frp", "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no repository root (go.mod beside tools/frp) above the test directory")
		}
		dir = parent
	}
}

func exists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// FRP returns the pinned bin/frps and bin/frpc, running `make frp` first
// when either is missing (about a minute cold on 2 cores). Call it from
// TestMain; it exits the test binary when the build fails.
func FRP() (frps, frpc string) {
	root, err := RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	frps, frpc = filepath.Join(root, "bin", "frps"), filepath.Join(root, "bin", "frpc")
	if !exists(frps) || !exists(frpc) {
		fmt.Fprintln(os.Stderr, "bin/frps or bin/frpc missing; running `make frp`")
		cmd := exec.Command("make", "-C", root, "frp")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "these tests need frps and frpc: `make frp` failed: %v\n", err)
			os.Exit(1)
		}
	}
	return frps, frpc
}

// PreviousFRP returns bin/frps-previous and bin/frpc-previous, the frp the
// package and the machine bundle carried before the current pin
// (tools/frp-previous), building them first when missing.
func PreviousFRP(t testing.TB) (frps, frpc string) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	frps, frpc = filepath.Join(root, "bin", "frps-previous"), filepath.Join(root, "bin", "frpc-previous")
	if !exists(frps) || !exists(frpc) {
		if out, err := exec.Command("make", "-C", root, "bin/frps-previous", "bin/frpc-previous").CombinedOutput(); err != nil {
			t.Fatalf("make bin/frps-previous bin/frpc-previous: %v\n%s", err, out)
		}
	}
	return frps, frpc
}

// PreviousFRPC is PreviousFRP's frpc.
func PreviousFRPC(t testing.TB) string {
	t.Helper()
	_, frpc := PreviousFRP(t)
	return frpc
}

// FRPVersion is the pinned frp version ("v0.71.0"), read from
// tools/frp/go.mod, its one place.
func FRPVersion(t testing.TB) string { t.Helper(); return frpVersionIn(t, "frp") }

// PreviousFRPVersion is the previous bundle's frp version, from
// tools/frp-previous/go.mod.
func PreviousFRPVersion(t testing.TB) string { t.Helper(); return frpVersionIn(t, "frp-previous") }

func frpVersionIn(t testing.TB, module string) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "tools", module, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^require github.com/fatedier/frp (v\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("tools/%s/go.mod requires no github.com/fatedier/frp", module)
	}
	return string(m[1])
}

// TunnelBlock is the number of ports TunnelPorts reserves at a time.
const TunnelBlock = portlock.BlockSize

// TunnelPorts reserves a block of TunnelBlock ports for a test's tunnel
// listeners until the test ends, and returns its first port: see
// portlock.Block.
func TunnelPorts(t testing.TB) int {
	t.Helper()
	lo, release, err := portlock.Block()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return lo
}

// StartCaddy runs a real caddy on the Caddyfile file, with its data and
// config (certificates, autosave) in a directory of the test's, and
// returns once it listens on port.
func StartCaddy(t *testing.T, file []byte, port int) *Proc {
	t.Helper()
	dir := t.TempDir()
	caddyfile := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(caddyfile, file, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_DATA_HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("HOME", dir)
	p := Start(t, "caddy", "caddy", "run", "--config", caddyfile, "--adapter", "caddyfile")
	WaitListening(t, port, 15*time.Second)
	return p
}
