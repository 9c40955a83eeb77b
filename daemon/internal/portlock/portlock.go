// Package portlock hands out loopback ports to the tests and the bench,
// for servers they start themselves (frps, Caddy, the daemon). A port, or
// a block of them, is reserved with an flock on a file named after it, so
// that tests running in parallel in other processes, and other calls in
// this one, are never handed the same port while it is held. Every port is
// below Linux's ephemeral range (32768 and up): a port picked there with
// Listen(":0") and closed was at times taken by an outgoing connection of a
// parallel test before frps could bind it.
package portlock

import (
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// held keeps every lock file open until its release is called: a caller
// that drops release (FreePort does) must still hold the port, and an
// *os.File nobody refers to is closed by the garbage collector, which
// would drop its flock and hand the port out again.
var held sync.Map // *os.File -> struct{}

// Single ports come from portLo–portHi; blocks of BlockSize from
// blockLo–blockHi.
const (
	portLo, portHi   = 10000, 19999
	blockLo, blockHi = 20000, 32000
	// BlockSize is the number of ports Block reserves at a time.
	BlockSize = 200
)

// Port reserves one port that binds now, until release is called or the
// process ends.
func Port() (port int, release func(), err error) {
	for range 500 {
		p := portLo + mrand.IntN(portHi-portLo+1)
		if release, ok, err := reserve(fmt.Sprintf("p%d", p), p, p); err != nil {
			return 0, nil, err
		} else if ok {
			return p, release, nil
		}
	}
	return 0, nil, fmt.Errorf("no free loopback port between %d and %d", portLo, portHi)
}

// Block reserves BlockSize consecutive ports, every one of which binds now,
// and returns the first.
func Block() (lo int, release func(), err error) {
	blocks := (blockHi - blockLo) / BlockSize
	start := mrand.IntN(blocks)
	for i := range blocks {
		lo := blockLo + (start+i)%blocks*BlockSize
		if release, ok, err := reserve(fmt.Sprint(lo), lo, lo+BlockSize-1); err != nil {
			return 0, nil, err
		} else if ok {
			return lo, release, nil
		}
	}
	return 0, nil, fmt.Errorf("no free block of %d ports between %d and %d", BlockSize, blockLo, blockHi)
}

// reserve takes the lock named name if it is free and every port from lo
// to hi binds.
func reserve(name string, lo, hi int) (release func(), ok bool, err error) {
	dir := filepath.Join(os.TempDir(), "tunnelsvc-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, false, err
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, false, err
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil || !free(lo, hi) {
		f.Close()
		return nil, false, nil
	}
	held.Store(f, struct{}{})
	return func() {
		if _, ok := held.LoadAndDelete(f); ok {
			f.Close()
		}
	}, true, nil
}

// free tells whether every port from lo to hi can be bound on loopback.
func free(lo, hi int) bool {
	for p := lo; p <= hi; p++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}
