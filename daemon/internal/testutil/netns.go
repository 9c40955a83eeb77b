package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
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
