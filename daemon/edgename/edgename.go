// Package edgename is the one rule for an edge's name, shared by the
// daemon (which names edges) and the machine's agent (which names a tunnel
// client unit and its config file after one, as root).
package edgename

import "fmt"

// Check accepts 1 to 32 lower-case letters, digits and inner hyphens: a
// name that is safe in a unit instance (revtunnel-client@<name>.service),
// a file name and a DNS label.
func Check(n string) error {
	if n == "" || len(n) > 32 {
		return fmt.Errorf("%q: an edge name has 1 to 32 characters", n)
	}
	for i, r := range n {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' && i > 0 && i < len(n)-1
		if !ok {
			return fmt.Errorf("%q: an edge name has only lower-case letters, digits and inner hyphens", n)
		}
	}
	return nil
}
