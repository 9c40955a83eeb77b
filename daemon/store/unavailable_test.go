package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
)

type sqlStateErr string

func (e sqlStateErr) Error() string    { return "server said " + string(e) }
func (e sqlStateErr) SQLState() string { return string(e) }

func TestUnavailable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("UNIQUE constraint failed: tunnels.name"), false},
		{fmt.Errorf("list machines: %w", sqlStateErr("23505")), false},
		{fmt.Errorf("list machines: %w", sqlStateErr("08006")), true},
		{sqlStateErr("57P01"), true},
		{sqlStateErr("57P03"), true},
		{sqlStateErr("40001"), false},
		{fmt.Errorf("query: %w", driver.ErrBadConn), true},
		{&net.OpError{Op: "dial", Net: "unix", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		// A slow query is not a lost database (an i/o timeout of the
		// connection is a net.OpError, above).
		{fmt.Errorf("query: %w", context.DeadlineExceeded), false},
		{context.Canceled, false},
	} {
		if got := Unavailable(c.err); got != c.want {
			t.Errorf("Unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
