// Package netcheck answers the set-up page's network questions: is this a
// valid hostname, what does a name resolve to, does router.<domain> point
// somewhere, and what is this server's public address.
package netcheck

// ValidHostname applies spec §4.2 note 3: at most 253 characters of
// dot-separated labels; each label 1 to 63 letters, digits or hyphens,
// beginning and ending with a letter or digit.
func ValidHostname(h string) bool {
	if len(h) == 0 || len(h) > 253 {
		return false
	}
	start := 0
	for i := 0; i <= len(h); i++ {
		if i < len(h) && h[i] != '.' {
			c := h[i]
			if !(isAlnum(c) || c == '-') {
				return false
			}
			continue
		}
		if !ValidLabel(h[start:i]) {
			return false
		}
		start = i + 1
	}
	return true
}

// ValidLabel reports whether l is one valid hostname label (also used for
// tunnel subdomains).
func ValidLabel(l string) bool {
	if len(l) < 1 || len(l) > 63 || !isAlnum(l[0]) || !isAlnum(l[len(l)-1]) {
		return false
	}
	for i := 0; i < len(l); i++ {
		if !isAlnum(l[i]) && l[i] != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
