package store

import (
	"database/sql/driver"
	"errors"
	"net"
	"strings"
	"syscall"
)

// Unavailable reports whether err says the database could not be reached
// (PostgreSQL restarting, failing over, or cut off), as opposed to a
// refused statement: the connection was refused, reset or timed out, the
// driver dropped a broken connection, or the server answered with a
// connection-exception or shutdown SQLSTATE (class 08, 57P01-57P03).
// Callers answer 503 `database unavailable` and keep serving what they
// hold in memory; nothing was half-applied (a transaction that lost its
// connection is rolled back by the server).
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		code := st.SQLState()
		return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03"
	}
	var op *net.OpError
	return errors.Is(err, driver.ErrBadConn) || errors.As(err, &op) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE)
}

// UnavailableMessage is the dashboard's answer while the database is gone.
const UnavailableMessage = "database unavailable"
