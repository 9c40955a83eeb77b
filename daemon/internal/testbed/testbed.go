// Package testbed gives system tests throwaway hosts that run a real systemd
// as PID 1 (scripts/testbed.sh does the booting). Every host is torn down in
// t.Cleanup, also when the test fails; a host that cannot boot fails the test.
package testbed

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Host is one booted testbed.
type Host struct {
	Name string
	Dir  string
	PID  int // PID 1 of the host, as the outer machine sees it
	t    testing.TB

	closed bool
}

// Root returns the module's root directory (where go.mod is).
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testbed: no go.mod above the working directory")
		}
		dir = parent
	}
}

func script(t testing.TB) string { return filepath.Join(Root(t), "scripts", "testbed.sh") }

// Boot starts a host named name and waits until systemd reports running or
// degraded. It fails the test when that does not happen.
func Boot(t testing.TB, name string) *Host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("testbed: system tests need root (namespaces, mounts, cgroups); run them as root, as CI does")
	}
	for _, tool := range []string{"unshare", "nsenter", "ip", "/lib/systemd/systemd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("testbed: %s is missing (scripts/install-deps.sh installs it): %v", tool, err)
		}
	}
	dir, err := os.MkdirTemp("", "tb-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	h := &Host{Name: name, Dir: dir, t: t}
	t.Cleanup(h.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script(t), "up", dir, name)
	cmd.Env = append(os.Environ(), "TESTBED_BOOT_TIMEOUT=60")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("testbed: %s did not boot: %v\n%s", name, err, out)
	}
	if h.PID, err = pidOf(dir); err != nil {
		t.Fatalf("testbed: %v", err)
	}
	t.Log(strings.TrimSpace(string(out)))
	return h
}

// pidOf reads the PID 1 of the running host in dir (testbed.sh writes it
// at boot and removes it at power-off).
func pidOf(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		return 0, fmt.Errorf("%s is not a running testbed: %v", dir, err)
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil {
		return 0, fmt.Errorf("%s/pid: %v", dir, err)
	}
	return pid, nil
}

// Reboot powers the host off and boots a new one over the same upper dir:
// what the host wrote to disk survives, /run, /tmp, processes and its
// network (the veth to another host) do not. Join the hosts again after it.
func (h *Host) Reboot() { h.boot("reboot") }

// PowerOff powers the host off as a power cut would (its network goes
// with it), keeping what it wrote to disk for PowerOn.
func (h *Host) PowerOff() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "bash", script(h.t), "halt", h.Dir).CombinedOutput(); err != nil {
		h.t.Fatalf("testbed: %s did not power off: %v\n%s", h.Name, err, out)
	}
}

// PowerOn boots a host PowerOff stopped, as Reboot's second half. Join the
// hosts again after it.
func (h *Host) PowerOn() { h.boot("up") }

// boot runs testbed.sh's op (up or reboot) and reads the new PID 1.
func (h *Host) boot(op string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script(h.t), op, h.Dir, h.Name)
	cmd.Env = append(os.Environ(), "TESTBED_BOOT_TIMEOUT=60")
	out, err := cmd.CombinedOutput()
	if err != nil {
		h.t.Fatalf("testbed: %s did not boot (%s): %v\n%s", h.Name, op, err, out)
	}
	if h.PID, err = pidOf(h.Dir); err != nil {
		h.t.Fatalf("testbed: %v", err)
	}
	h.t.Log(strings.TrimSpace(string(out)))
}

// Close powers the host off and removes everything it left: processes,
// mounts, cgroups, the directory. Boot registers it with t.Cleanup; calling
// it earlier is fine.
func (h *Host) Close() {
	if h.closed {
		return
	}
	h.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", script(h.t), "down", h.Dir).CombinedOutput()
	if err != nil {
		h.t.Errorf("testbed: tearing down %s: %v\n%s", h.Name, err, out)
	}
	if _, err := os.Stat(h.Dir); err == nil {
		h.t.Errorf("testbed: %s is still there after teardown", h.Dir)
	}
}

// Exec runs a command inside the host and returns its combined output.
// Every command is bounded by 60 s.
func (h *Host) Exec(args ...string) (string, error) {
	return h.ExecInput(nil, args...)
}

// ExecInput is Exec with stdin.
func (h *Host) ExecInput(stdin []byte, args ...string) (string, error) {
	return h.exec(60*time.Second, stdin, args...)
}

// MustWithin is Must bounded by d instead of 60 s, for a command whose time
// grows with how busy the outer machine is (update-ca-certificates runs
// openssl once per certificate).
func (h *Host) MustWithin(d time.Duration, args ...string) string {
	h.t.Helper()
	out, err := h.exec(d, nil, args...)
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

func (h *Host) exec(d time.Duration, stdin []byte, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	// What `testbed.sh exec` does, without the shell: the tests run
	// hundreds of commands in hosts, and each bash (with its subshell and
	// cat) cost about as much as the command itself. The pid file, not
	// h.PID: a host powered off has none, and its old PID may be reused.
	pid, err := pidOf(h.Dir)
	if err != nil {
		return "", fmt.Errorf("%s: %v", h.Name, err)
	}
	// -r -w: the host's root and cwd; without them writes hit the real /.
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(pid), "-m", "-p", "-n", "-u", "-r", "-w", "--"}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %q: %w\n%s", h.Name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Must runs a command inside the host and fails the test if it fails.
func (h *Host) Must(args ...string) string {
	h.t.Helper()
	out, err := h.Exec(args...)
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// CopyIn copies a file from the outer machine to dst inside the host.
func (h *Host) CopyIn(src, dst string, mode os.FileMode) {
	h.t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		h.t.Fatal(err)
	}
	h.WriteFile(dst, data, mode)
}

// WriteFile writes data to dst inside the host, creating its parents.
func (h *Host) WriteFile(dst string, data []byte, mode os.FileMode) {
	h.t.Helper()
	if _, err := h.ExecInput(data, "sh", "-c", `mkdir -p "$(dirname "$1")" && cat >"$1" && chmod "$2" "$1"`,
		"sh", dst, fmt.Sprintf("%o", mode.Perm())); err != nil {
		h.t.Fatal(err)
	}
}

// Join links two hosts with a veth pair, eth0 on each, with the given
// addresses (CIDRs of a private test subnet, e.g. 10.213.0.1/24).
func Join(t testing.TB, a *Host, addrA string, b *Host, addrB string) {
	t.Helper()
	JoinOn(t, a, "eth0", addrA, b, addrB)
}

// JoinOn is Join with the link named ifA on a: a VPS joined to several
// machines has one link to each (eth0, eth1...), each on its own subnet.
func JoinOn(t testing.TB, a *Host, ifA, addrA string, b *Host, addrB string) {
	t.Helper()
	JoinNamed(t, a, ifA, addrA, b, "eth0", addrB)
}

// JoinNamed is Join with the link named ifA on a and ifB on b: hosts
// linked to several others (two edges, each linked to a machine and to
// the database's host) have one link to each.
func JoinNamed(t testing.TB, a *Host, ifA, addrA string, b *Host, ifB, addrB string) {
	t.Helper()
	out, err := exec.Command("bash", script(t), "veth", a.Dir, addrA, b.Dir, addrB, ifA, ifB).CombinedOutput()
	if err != nil {
		t.Fatalf("testbed: veth %s-%s: %v\n%s", a.Name, b.Name, err, out)
	}
}

// DialContext connects from inside the host's network namespace, so that an
// http.Client in the test reaches the host's loopback. The socket is made on
// a thread that entered the namespace and is then thrown away.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// Never unlocked: the thread dies with this goroutine instead of
		// going back to the pool inside the host's namespace.
		runtime.LockOSThread()
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", h.PID))
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("setns into %s: %w", h.Name, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
