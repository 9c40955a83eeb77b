//go:build !linux

package agent

import "errors"

// pathMTU is read from the kernel on Linux only.
func pathMTU(string) (PathMTU, error) {
	return PathMTU{}, errors.New("the path MTU is read on Linux only")
}
