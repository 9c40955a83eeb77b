//go:build tools

// Package frpprevious pins the frp the machine bundle carried before the
// current one (tools/frp), for the tests that prove a machine not yet
// updated keeps its tunnels against the new frps: `make bin/frpc-previous`
// builds its frpc.
package frpprevious

import (
	_ "github.com/fatedier/frp/cmd/frpc"
)
