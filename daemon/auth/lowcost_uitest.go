//go:build tunnelsvc_uitest

package auth

import (
	"fmt"
	"os"
)

// The dashboard's browser tests run a daemon built with this tag
// (bin/test/tunnelsvc, `make test-ui`): they start dozens of daemons and
// log in a hundred times to test what the dashboard shows, not what
// argon2id costs. The package is never built with it (TestShippedBinary
// checks bin/tunnelsvc), and such a daemon says what it is when it starts.
func init() {
	lowCost()
	fmt.Fprintln(os.Stderr, "tunnelsvc: a build for the dashboard's tests: passwords are hashed at a low cost; never run it for real")
}
