package testutil

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestFreePortIsBelowTheEphemeralRange: the ports the tests give frps and
// Caddy come from below the kernel's ephemeral range, where no outgoing
// connection of a parallel test can take one before the server binds it.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatal(err)
	}
	ephemeral, _ := strconv.Atoi(strings.Fields(string(b))[0])
	for range 50 {
		if p := FreePort(t); p >= ephemeral {
			t.Fatalf("FreePort gave %d, in the ephemeral range (from %d)", p, ephemeral)
		}
	}
}
