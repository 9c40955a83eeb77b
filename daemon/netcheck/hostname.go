// Package netcheck answers the set-up page's network questions: is this a
// valid hostname, what does a name resolve to, does router.<domain> point
// somewhere, and what is this server's public address.
package netcheck

import "github.com/tunnelsvc/tunnelsvc/daemon/validate"

// ValidHostname applies spec §4.2 note 3 (validate.Hostname, the one
// hostname validator).
func ValidHostname(h string) bool { return validate.Hostname(h) == nil }
