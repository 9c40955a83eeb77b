package revtunnel_test

import (
	"flag"
	"os"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// frps and frpc are the pinned binaries in the repository's bin/.
var frps, frpc string

// TestMain finds bin/frps and bin/frpc, building them with `make frp` when
// they are missing. Started with squatterEnv set, the test binary is a
// squatter on an agent port instead (see startSquatter).
func TestMain(m *testing.M) {
	auth.LowCostForTests()
	if port := os.Getenv(squatterEnv); port != "" {
		squat(port)
		return
	}
	flag.Parse()
	frps, frpc = testutil.FRP()
	os.Exit(m.Run())
}
