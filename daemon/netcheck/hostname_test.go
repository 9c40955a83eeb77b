package netcheck

import (
	"strings"
	"testing"
)

func TestValidHostname(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	cases := map[string]bool{
		"example.com": true, "router.example.com": true, "a": true, "x-1.y2": true, "A.B": true,
		long63 + ".com": true, strings.Repeat("a", 64) + ".com": false,
		strings.Repeat(long63+".", 3) + strings.Repeat("a", 61): true,  // 253
		strings.Repeat(long63+".", 3) + strings.Repeat("a", 62): false, // 254
		"": false, ".": false, "example.com.": false, ".example.com": false, "a..b": false,
		"-a.com": false, "a-.com": false, "a_b.com": false, "a b": false, "é.com": false, "1.2.3.4": true,
	}
	for h, want := range cases {
		if got := ValidHostname(h); got != want {
			t.Errorf("ValidHostname(%q) = %v, want %v", h, got, want)
		}
	}
}

// FuzzValidHostname checks the validator against the rule written out
// another way: split on dots and test each label.
func FuzzValidHostname(f *testing.F) {
	for _, s := range []string{"example.com", "a..b", "-x", "x-", strings.Repeat("a", 64), "é", "a.b.c.", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		want := len(h) >= 1 && len(h) <= 253
		for _, l := range strings.Split(h, ".") {
			ok := len(l) >= 1 && len(l) <= 63
			for i := 0; ok && i < len(l); i++ {
				c := l[i]
				alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
				ok = alnum || (c == '-' && i != 0 && i != len(l)-1)
			}
			want = want && ok
		}
		if got := ValidHostname(h); got != want {
			t.Fatalf("ValidHostname(%q) = %v, want %v", h, got, want)
		}
	})
}
