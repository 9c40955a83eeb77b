//go:build pprof

package main

// Built only with `-tags pprof`, never in the shipped daemon: Go's
// profiling endpoints on the loopback address in TUNNELSVC_PPROF, to find
// where `make bench`'s figures spend their time (docs/development.md).

import (
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on http.DefaultServeMux, which nothing else serves
	"net/netip"
	"os"
)

func init() {
	addr := os.Getenv("TUNNELSVC_PPROF")
	if addr == "" {
		return
	}
	if ap, err := netip.ParseAddrPort(addr); err != nil || !ap.Addr().IsLoopback() {
		fmt.Fprintf(os.Stderr, "tunnelsvc: TUNNELSVC_PPROF=%q is not a loopback address:port; no profiling\n", addr)
		return
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tunnelsvc: pprof:", err)
		return
	}
	go http.Serve(l, nil)
}
