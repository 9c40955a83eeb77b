package testbed

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listenIn opens a TCP listener inside h's network namespace.
func listenIn(t *testing.T, h *Host, addr string) net.Listener {
	t.Helper()
	ch := make(chan any, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with us
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", h.PID))
		if err != nil {
			ch <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- err
			return
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			ch <- err
			return
		}
		ch <- l
	}()
	switch v := (<-ch).(type) {
	case net.Listener:
		t.Cleanup(func() { v.Close() })
		return v
	case error:
		t.Fatal(v)
	}
	return nil
}

func TestTwoHostsAndTeardown(t *testing.T) {
	vps, machine := Boot(t, "vps"), Boot(t, "machine")

	// Each host is its own system: hostname, file system and network.
	if got := strings.TrimSpace(machine.Must("hostname")); got != "machine" {
		t.Fatalf("hostname %q", got)
	}
	vps.WriteFile("/etc/tunnelsvc-testbed-probe", []byte("only here\n"), 0o600)
	if got := vps.Must("stat", "-c", "%a %s", "/etc/tunnelsvc-testbed-probe"); strings.TrimSpace(got) != "600 10" {
		t.Fatalf("copied file: %q", got)
	}
	if _, err := os.Stat("/etc/tunnelsvc-testbed-probe"); !os.IsNotExist(err) {
		t.Fatalf("a write inside the testbed reached the real /: %v", err)
	}
	if _, err := machine.Exec("test", "-e", "/etc/tunnelsvc-testbed-probe"); err == nil {
		t.Fatal("a write on one host shows on the other")
	}

	// A unit gets its credentials, as tunnelsvc.service gets the database
	// URL on a VPS (LoadCredential=).
	vps.WriteFile("/etc/testbed-credential", []byte("from a file\n"), 0o600)
	vps.Must("systemd-run", "--wait", "--unit=credential-probe", "-p", "LoadCredential=probe:/etc/testbed-credential",
		"sh", "-c", `cp "$CREDENTIALS_DIRECTORY/probe" /root/credential-seen`)
	if got := vps.Must("cat", "/root/credential-seen"); got != "from a file\n" {
		t.Fatalf("the unit's credential: %q", got)
	}

	// Joined by a veth pair: the machine reaches the VPS at its address.
	Join(t, vps, "10.213.0.1/24", machine, "10.213.0.2/24")
	l := listenIn(t, vps, "10.213.0.1:7000")
	go func() {
		c, err := l.Accept()
		if err == nil {
			io.WriteString(c, "hello from vps\n")
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := machine.DialContext(ctx, "tcp", "10.213.0.1:7000")
	if err != nil {
		t.Fatalf("machine -> vps: %v", err)
	}
	got, _ := io.ReadAll(c)
	c.Close()
	if string(got) != "hello from vps\n" {
		t.Fatalf("read %q", got)
	}

	// Teardown leaves no process, mount, cgroup or directory.
	pid, dir := vps.PID, vps.Dir
	cg, err := os.ReadFile(dir + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	vps.Close()
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "systemd" {
			t.Fatalf("PID %d (the host's systemd) still runs", pid)
		}
	}
	if out, _ := exec.Command("findmnt", "-rn", "-o", "TARGET").Output(); strings.Contains(string(out), dir) {
		t.Fatalf("mounts left under %s:\n%s", dir, out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s left behind", dir)
	}
	for _, h := range []string{"/sys/fs/cgroup/systemd/", "/sys/fs/cgroup/unified/"} {
		if _, err := os.Stat(h + strings.TrimSpace(string(cg))); err == nil {
			t.Fatalf("cgroup %s%s left behind", h, cg)
		}
	}
}

// TestReboot: what the host wrote to disk survives a reboot, what lives in
// /run and its processes do not, and systemd is a new PID 1.
func TestReboot(t *testing.T) {
	h := Boot(t, "rebooted")
	h.WriteFile("/var/lib/probe/disk", []byte("kept\n"), 0o600)
	h.WriteFile("/run/probe", []byte("lost\n"), 0o600)
	h.Must("systemd-run", "--unit=probe-sleeper", "sleep", "infinity")
	before := h.PID
	inv1 := strings.TrimSpace(h.Must("systemctl", "show", "-p", "InvocationID", "--value", "systemd-journald.service"))

	h.Reboot()
	if h.PID == before {
		t.Fatalf("PID 1 is still %d", before)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", before)); err == nil {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", before)); strings.TrimSpace(string(comm)) == "systemd" {
			t.Fatalf("the old PID 1 (%d) still runs", before)
		}
	}
	if got := h.Must("cat", "/var/lib/probe/disk"); got != "kept\n" {
		t.Fatalf("file on disk after reboot: %q", got)
	}
	if _, err := h.Exec("test", "-e", "/run/probe"); err == nil {
		t.Fatal("/run survived the reboot")
	}
	if st, _ := h.Exec("systemctl", "is-active", "probe-sleeper"); strings.TrimSpace(st) == "active" {
		t.Fatal("a transient unit survived the reboot")
	}
	// A new systemd started every unit anew.
	if inv2 := strings.TrimSpace(h.Must("systemctl", "show", "-p", "InvocationID", "--value", "systemd-journald.service")); inv2 == inv1 {
		t.Fatalf("journald kept invocation %s", inv1)
	}
}
