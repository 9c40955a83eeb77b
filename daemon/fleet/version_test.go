package fleet

import "testing"

func TestCompareVersions(t *testing.T) {
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
		if got := CompareVersions(c.a, c.b); got != c.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := CompareVersions(c.b, c.a); got != -c.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
}
