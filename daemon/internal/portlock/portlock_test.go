package portlock

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestBlocksNeverOverlap: blocks reserved while others are held never
// share a port, and every port of each binds, as frps will bind them.
func TestBlocksNeverOverlap(t *testing.T) {
	held := map[int]int{}
	for i := range 20 {
		lo, release, err := Block()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(release)
		for p := lo; p < lo+BlockSize; p++ {
			if j, ok := held[p]; ok {
				t.Fatalf("reservation %d got port %d, already in reservation %d", i, p, j)
			}
			held[p] = i
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", lo+BlockSize-1))
		if err != nil {
			t.Fatalf("last port of the block from %d: %v", lo, err)
		}
		l.Close()
	}
}

// TestPortsNeverSharedBetweenProcesses: another process reserving ports
// while this one holds 300 is never handed one of them, and no port is
// in the kernel's ephemeral range, where outgoing connections take ports.
func TestPortsNeverSharedBetweenProcesses(t *testing.T) {
	if os.Getenv("PORTLOCK_CHILD") != "" {
		for range 300 {
			p, _, err := Port() // held until the process exits
			if err != nil {
				fmt.Println("error", err)
				return
			}
			fmt.Println(p)
		}
		return
	}
	ephemeral := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		ephemeral, _ = strconv.Atoi(strings.Fields(string(b))[0])
	}
	mine := map[int]bool{}
	for range 300 {
		p, release, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(release)
		if mine[p] {
			t.Fatalf("port %d handed out twice in one process", p)
		}
		if p >= ephemeral {
			t.Fatalf("port %d is in the ephemeral range (from %d)", p, ephemeral)
		}
		mine[p] = true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPortsNeverSharedBetweenProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PORTLOCK_CHILD=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	n := 0
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		p, err := strconv.Atoi(sc.Text())
		if err != nil {
			continue // the child's PASS line
		}
		n++
		if mine[p] {
			t.Fatalf("the child process was handed port %d, which this one holds", p)
		}
	}
	if n != 300 {
		t.Fatalf("the child reserved %d ports, want 300:\n%s", n, out)
	}
}
