//go:build tools

// Package pebble pins Pebble, Let's Encrypt's small ACME test server, which
// the tests use to prove the whole HTTPS path (Caddy obtaining a certificate
// over ACME) without reaching the internet. The version is the one in
// go.mod, and only there; `make pebble` builds bin/pebble from it.
package pebble

import (
	_ "github.com/letsencrypt/pebble/v2/cmd/pebble"
)
