//go:build tools

// Package frpprevious pins the frp the package and the machine bundle
// carried before the current one (tools/frp), for the tests of an upgrade
// from it: `make bin/frps-previous bin/frpc-previous` builds them.
package frpprevious

import (
	_ "github.com/fatedier/frp/cmd/frpc"
	_ "github.com/fatedier/frp/cmd/frps"
)
