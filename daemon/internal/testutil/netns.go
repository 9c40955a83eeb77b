package testutil

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// NeedNetnsTools skips when a tool is missing, naming the Debian package
// scripts/install-deps.sh installs it from (tools: command -> package), and
// fails when the test is not root: network namespaces need it.
func NeedNetnsTools(t testing.TB, tools map[string]string) {
	t.Helper()
	for tool, pkg := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/install-deps.sh installs %s)", tool, pkg)
		}
	}
	if os.Geteuid() != 0 {
		t.Fatal("network namespace tests need root (make test runs as root, as CI does)")
	}
}

// Run runs a command and fails the test with its output when it fails.
func Run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

var nsSeq atomic.Int32

// NewNetns creates a network namespace named prefix-<pid>-<n>, with its
// loopback up, that is deleted when the test ends.
func NewNetns(t testing.TB, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), nsSeq.Add(1))
	Run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	Run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// NetnsSeq is a number unique in this test process, for naming the links
// (veth pairs) a test adds between its namespaces.
func NetnsSeq() int32 { return nsSeq.Add(1) }

// Visitor is a network namespace joined to this one by a veth pair: a
// client on the internet, as a VPS's services see one. Addr is its
// address, HostAddr this side's, which it reaches.
type Visitor struct{ NS, Addr, HostAddr string }

// NewVisitor makes a Visitor on 10.199.<n>.0/30, n from 100 up by test
// process and call; its namespace and both ends of the link go when the
// test ends.
func NewVisitor(t testing.TB) Visitor {
	t.Helper()
	ns := NewNetns(t, "tsvcvis")
	n := NetnsSeq()
	sub := 100 + (int(n)+os.Getpid())%150
	host, peer := fmt.Sprintf("tsv%dh%d", os.Getpid()%10000, n), fmt.Sprintf("tsv%dp%d", os.Getpid()%10000, n)
	v := Visitor{NS: ns, Addr: fmt.Sprintf("10.199.%d.2", sub), HostAddr: fmt.Sprintf("10.199.%d.1", sub)}
	Run(t, "ip", "link", "add", host, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() { exec.Command("ip", "link", "del", host).Run() })
	Run(t, "ip", "link", "set", peer, "netns", ns)
	Run(t, "ip", "addr", "add", v.HostAddr+"/30", "dev", host)
	Run(t, "ip", "-n", ns, "addr", "add", v.Addr+"/30", "dev", peer)
	Run(t, "ip", "link", "set", host, "up")
	Run(t, "ip", "-n", ns, "link", "set", peer, "up")
	return v
}

// Curl runs curl in the visitor's namespace with args, and returns its
// output, or the error with it.
func (v Visitor) Curl(args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", v.NS, "curl", "-sS", "--max-time", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("curl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// HelperInNetns runs this test binary again in network namespace ns, with
// env added to its environment (the test's TestMain picks its part by
// it), and waits for the line "ready" it prints once it serves. It stops
// when its stdin closes, at the test's end (killed after 3 s).
func HelperInNetns(t testing.TB, name, ns string, env ...string) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0])
	cmd.Env = append(os.Environ(), env...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); strings.TrimSpace(line) != "ready" {
		t.Fatalf("%s helper: %q", name, line)
	}
}
