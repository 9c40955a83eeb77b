package config

import "testing"

// The gate answers only the web proxy on this box: a non-loopback address
// is refused at start.
func TestGateListen(t *testing.T) {
	c, err := parse(t)
	if err != nil || c.GateListen != "127.0.0.1:7382" {
		t.Fatalf("default gate listener: %q %v", c.GateListen, err)
	}
	if c, err = parse(t, "--gate-listen", "[::1]:9000"); err != nil || c.GateListen != "[::1]:9000" {
		t.Fatalf("%q %v", c.GateListen, err)
	}
	t.Setenv("TUNNELSVC_GATE_LISTEN", "127.0.0.2:9001")
	if c, err = parse(t); err != nil || c.GateListen != "127.0.0.2:9001" {
		t.Fatalf("from the environment: %q %v", c.GateListen, err)
	}
	for _, bad := range []string{"0.0.0.0:7382", "192.0.2.1:7382", "localhost:7382", "127.0.0.1"} {
		if _, err := parse(t, "--gate-listen", bad); err == nil {
			t.Errorf("--gate-listen %s accepted", bad)
		}
	}
}
