package testutil

import (
	"fmt"
	"net"
	"testing"
)

// TestTunnelPortsNeverOverlap: blocks reserved while others are held never
// share a port, and every port of each is free to bind, as frps will.
func TestTunnelPortsNeverOverlap(t *testing.T) {
	held := map[int]int{}
	for i := range 20 {
		lo := TunnelPorts(t)
		for p := lo; p < lo+TunnelBlock; p++ {
			if j, ok := held[p]; ok {
				t.Fatalf("reservation %d got port %d, already in reservation %d", i, p, j)
			}
			held[p] = i
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", lo+TunnelBlock-1))
		if err != nil {
			t.Fatalf("last port of the block from %d: %v", lo, err)
		}
		l.Close()
	}
}
