package config

import "testing"

// Flags whose values reach generated files and shell text go through the
// same validators as the API (issue 12 item 4).
func TestFlagsRefuseInjection(t *testing.T) {
	for _, args := range [][]string{
		{"--local-nets", "fe80::1%lo"},
		{"--base-url", "https://vps.example.com/x'$(id)"},
		{"--base-url", "https://[fe80::1%lo]"},
		{"--server-host", "fe80::1%lo"},
		{"--server-host", "vps.example.com\"\nuser = \"m1"},
	} {
		if _, err := parse(t, args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	c, err := parse(t, "--server-host", "2001:DB8::1", "--base-url", "https://[2001:db8::1]:8443/")
	if err != nil || c.ServerHost != "2001:db8::1" || c.BaseURL != "https://[2001:db8::1]:8443" {
		t.Fatalf("plain values: %+v, %v", c, err)
	}
}
