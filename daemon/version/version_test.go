package version

import "testing"

func TestCompare(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{
		{"1.0", "1.0", 0},
		{"1.9.0", "1.10.0", -1},
		{"1.10.0", "1.9.0", 1},
		{"2", "10", -1},
		{"1.0", "1.0.1", -1},
		{"1.0~rc1", "1.0", -1},
		{"1.0", "1.0a", -1},
		{"1.0a", "1.0b", -1},
		{"1.0-3-gabc", "1.0-12-gdef", -1},
		{"1.4.0-3-gabc", "1.4.1", -1},
		{"007", "7", 0},
		{"v1.2", "v1.10", -1},
		{"", "1", -1},
		{"dev", "dev", 0},
	}
	for _, c := range cases {
		if got := Compare(c.a, c.b); got != c.want {
			t.Errorf("Compare(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := Compare(c.b, c.a); got != -c.want {
			t.Errorf("Compare(%q, %q) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
}

// TestNewer: the refusal to go back applies only to versions that can be
// ordered. The issue it fixes: a machine on bundle 6260dd4 (a bare hash,
// from a build before versions were ordered) and a server on 30dfb52 made
// from the next commit; by their digits 6260 > 30, so the update was
// refused as a downgrade.
func TestNewer(t *testing.T) {
	for _, c := range []struct {
		machine, server string
		want            bool
	}{
		{"6260dd4", "30dfb52", false},
		{"30dfb52", "6260dd4", false},
		{"6260dd4-dirty", "0.1.0+git640.6e278b59ac0d", false},
		{"0.1.0+git640.6e278b59ac0d", "6260dd4", false},
		{"0.1.0+git641.0a1b2c3d4e5f", "0.1.0+git640.6e278b59ac0d", true},
		{"0.1.0+git640.6e278b59ac0d", "0.1.0+git641.0a1b2c3d4e5f", false},
		{"0.1.0+git99.ffffffffffff", "0.1.0+git100.000000000000", false},
		{"1.0.0", "0.1.0+git900.abcabcabcabc", true},
		{"3.0.0", "2.0.0", true},
		{"2.0.0", "2.0.0", false},
		{"", "2.0.0", false},
	} {
		if got := Newer(c.machine, c.server); got != c.want {
			t.Errorf("Newer(%q, %q) = %v, want %v", c.machine, c.server, got, c.want)
		}
	}
}
