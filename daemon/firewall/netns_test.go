package firewall_test

import (
	"bufio"
	"context"
	"fmt"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
)

// The test binary doubles as the listener and the prober it runs inside the
// namespaces (a socket belongs to the namespace of the process that opens it).
const helperEnv = "TUNNELSVC_FW_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "listen":
		listenHelper(strings.Split(os.Getenv("PORTS"), ","))
		return
	case "dial":
		dialHelper(strings.Split(os.Getenv("TARGETS"), ","))
		return
	}
	os.Exit(m.Run())
}

// listenHelper accepts and closes connections on each port (dual stack)
// until its stdin closes.
func listenHelper(ports []string) {
	for _, p := range ports {
		l, err := net.Listen("tcp", "[::]:"+p)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
}

// dialTimeout bounds each probe: a dropped SYN is answered by nothing.
const dialTimeout = 800 * time.Millisecond

// dialHelper prints "target open" or "target closed" for each target.
func dialHelper(targets []string) {
	var wg sync.WaitGroup
	results := make([]string, len(targets))
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", t, dialTimeout)
			if err != nil {
				results[i] = t + " closed"
				return
			}
			c.Close()
			results[i] = t + " open"
		}()
	}
	wg.Wait()
	fmt.Println(strings.Join(results, "\n"))
}

// netnsTools are the commands the namespace tests run, and their packages.
var netnsTools = map[string]string{"nft": "nftables", "ip": "iproute2"}

func needTools(t testing.TB) {
	t.Helper()
	testutil.NeedNetnsTools(t, netnsTools)
}

// haveNetnsTools reports whether needTools would find every tool.
func haveNetnsTools() bool {
	for tool := range netnsTools {
		if _, err := exec.LookPath(tool); err != nil {
			return false
		}
	}
	return true
}

func run(t testing.TB, args ...string) string {
	t.Helper()
	return testutil.Run(t, args...)
}

func newNetns(t testing.TB) string {
	t.Helper()
	return testutil.NewNetns(t, "tsvc9")
}

// pair is a server namespace and a client namespace joined by a veth pair on
// a private test subnet that exists only between them.
type pair struct {
	srv, cli     string
	srv4, srv6   string
	srvListeners *exec.Cmd
}

func newPair(t testing.TB) *pair {
	t.Helper()
	p := &pair{srv: newNetns(t), cli: newNetns(t), srv4: "10.199.9.1", srv6: "fd99:9::1"}
	n := testutil.NetnsSeq()
	vs, vc := fmt.Sprintf("t9s%d", n), fmt.Sprintf("t9c%d", n)
	run(t, "ip", "link", "add", vs, "type", "veth", "peer", "name", vc)
	run(t, "ip", "link", "set", vs, "netns", p.srv)
	run(t, "ip", "link", "set", vc, "netns", p.cli)
	run(t, "ip", "-n", p.srv, "addr", "add", p.srv4+"/24", "dev", vs)
	run(t, "ip", "-n", p.cli, "addr", "add", "10.199.9.2/24", "dev", vc)
	run(t, "ip", "-n", p.srv, "addr", "add", p.srv6+"/64", "dev", vs, "nodad")
	run(t, "ip", "-n", p.cli, "addr", "add", "fd99:9::2/64", "dev", vc, "nodad")
	run(t, "ip", "-n", p.srv, "link", "set", vs, "up")
	run(t, "ip", "-n", p.cli, "link", "set", vc, "up")
	return p
}

// listen starts listeners on ports inside the server namespace.
func (p *pair) listen(t testing.TB, ports ...int) {
	t.Helper()
	s := make([]string, len(ports))
	for i, n := range ports {
		s[i] = strconv.Itoa(n)
	}
	testutil.HelperInNetns(t, "listener", p.srv, helperEnv+"=listen", "PORTS="+strings.Join(s, ","))
}

// probe connects from namespace ns to each target and returns target ->
// "open" or "closed".
func probe(t testing.TB, ns string, targets ...string) map[string]string {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=dial", "TARGETS="+strings.Join(targets, ","))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			got[k] = v
		}
	}
	return got
}

// nsRunner runs every command inside ns.
func nsRunner(ns string) cmdrun.Runner {
	return cmdrun.Exec{Prefix: []string{"ip", "netns", "exec", ns}, Timeout: 20 * time.Second}
}

func nftIn(t testing.TB, ns string, args ...string) string {
	t.Helper()
	return run(t, append([]string{"ip", "netns", "exec", ns, "nft"}, args...)...)
}

var _ = context.Background
