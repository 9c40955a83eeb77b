//go:build !linux

package yamux

// corker: TCP_CORK is Linux's; elsewhere batches go out as they are.
func corker(any) func(on bool) { return nil }
