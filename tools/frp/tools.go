//go:build tools

// Package frp pins the tunnel engine (frps on the VPS, frpc on machines).
// The version is the one in go.mod, and only there; `make frp` builds both
// binaries from it into bin/.
package frp

import (
	_ "github.com/fatedier/frp/cmd/frpc"
	_ "github.com/fatedier/frp/cmd/frps"
)
