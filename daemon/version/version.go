package version

import "regexp"

// Compare orders two version strings the way dpkg does, simplified:
// the strings are split into runs of digits and runs of anything else;
// digit runs compare as numbers, other runs byte by byte, where '~' sorts
// before everything, even the end of the string (1.0~rc1 < 1.0). It
// answers -1, 0 or 1. Versions here are package versions (1.4.0,
// 0.1.0+git640.6e278b59ac0d, 1.10.0), which this orders as people do.
func Compare(a, b string) int {
	for a != "" || b != "" {
		var x, y string
		x, a = cut(a, false)
		y, b = cut(b, false)
		if c := compareText(x, y); c != 0 {
			return c
		}
		x, a = cut(a, true)
		y, b = cut(b, true)
		if c := compareNumber(x, y); c != 0 {
			return c
		}
	}
	return 0
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// cut splits s after its leading run of digits (digits true) or non-digits.
func cut(s string, digits bool) (string, string) {
	i := 0
	for i < len(s) && isDigit(s[i]) == digits {
		i++
	}
	return s[:i], s[i:]
}

// order is dpkg's weight of a character: '~' first, then the end, then
// letters, then everything else.
func order(s string, i int) int {
	if i >= len(s) {
		return 0
	}
	c := s[i]
	switch {
	case c == '~':
		return -1
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		return int(c)
	}
	return int(c) + 256
}

func compareText(a, b string) int {
	for i := 0; i < len(a) || i < len(b); i++ {
		if x, y := order(a, i), order(b, i); x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

func compareNumber(a, b string) int {
	for len(a) > 0 && a[0] == '0' {
		a = a[1:]
	}
	for len(b) > 0 && b[0] == '0' {
		b = b[1:]
	}
	switch {
	case len(a) != len(b):
		if len(a) < len(b) {
			return -1
		}
		return 1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Newer reports whether a machine's bundle version a is newer than the
// server's b, so that updating it to b would go back. A version that
// cannot be ordered never is: builds before versions were ordered named
// their bundle by a bare commit hash ("6260dd4", from `git describe
// --always` in a repository without tags), and two hashes say nothing of
// which commit came first.
func Newer(a, b string) bool {
	return Ordered(a) && Ordered(b) && Compare(a, b) > 0
}

// Ordered reports whether v is a version that can be ordered: not empty,
// and not a bare commit hash (7 to 40 hex digits, "-dirty" allowed).
func Ordered(v string) bool {
	return v != "" && !bareHash.MatchString(v)
}

var bareHash = regexp.MustCompile(`^[0-9a-f]{7,40}(-dirty)?$`)
