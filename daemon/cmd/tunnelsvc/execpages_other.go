//go:build !linux

package main

// releaseStartupPages: only Linux's madvise is used.
func releaseStartupPages() {}
