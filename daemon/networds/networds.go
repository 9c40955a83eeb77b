// Package networds says in words why a network request failed, for the
// dashboard and the activity feed: an operator reads "nothing accepts
// connections at 127.0.0.1:443", not Go's "dial tcp 127.0.0.1:443:
// connect: connection refused".
package networds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
)

// Say is err in words. It names the host or address the error names, and
// never Go's own words for the operation (dial, lookup, read).
func Say(err error) string {
	if err == nil {
		return ""
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return lookupWords(dnsErr)
	}
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var alert tls.AlertError
	var recordHeader tls.RecordHeaderError
	switch {
	case errors.As(err, &unknownCA):
		return "its TLS certificate is not signed by an authority this server trusts"
	case errors.As(err, &hostname):
		return "its TLS certificate is for other names (" + hostname.Host + " is not among them)"
	case errors.As(err, &invalid):
		return "its TLS certificate is not valid (expired, or not valid yet)"
	case errors.As(err, &alert):
		return "the TLS handshake was refused (" + alert.Error() + ")"
	case errors.As(err, &recordHeader):
		return "it does not speak TLS on that port"
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		// The peer answered the handshake with a TLS alert.
		return "the TLS handshake was refused (" + op.Err.Error() + ")"
	}
	at := address(err)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing accepts connections at " + at
	case errors.Is(err, syscall.ENETUNREACH):
		return "this server has no route to " + at + " (network unreachable)"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return at + " cannot be reached (host unreachable)"
	case errors.Is(err, syscall.ECONNRESET):
		return at + " closed the connection (reset)"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), isTimeout(err):
		return "no answer from " + at + " in time"
	case errors.Is(err, context.Canceled):
		return "the request was cancelled"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return at + " closed the connection before answering"
	}
	var ue *url.Error
	if errors.As(err, &ue) || errors.As(err, &op) {
		return "the request to " + at + " failed: " + last(err)
	}
	// Not a network failure: an error of the caller's own, in its words.
	return err.Error()
}

// lookupWords is a failed name lookup in words.
func lookupWords(e *net.DNSError) string {
	switch {
	case e.IsNotFound:
		return e.Name + " does not exist in DNS"
	case e.IsTimeout:
		return "looking up " + e.Name + " in DNS got no answer in time"
	}
	server := "the DNS server"
	if e.Server != "" {
		server = "the DNS server " + e.Server
	}
	why := e.Err
	switch {
	case strings.Contains(why, "network is unreachable"):
		why = "this server has no network route to it"
	case strings.Contains(why, "connection refused"):
		why = "it refused the connection"
	case strings.Contains(why, "server misbehaving"):
		why = "it answered with an error"
	}
	return fmt.Sprintf("%s could not be looked up in DNS: %s (%s)", e.Name, why, server)
}

// address is the host or address err names: the URL's host, or the
// connection's remote address; "the server" when none.
func address(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
			return u.Host
		}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Addr != nil {
		return op.Addr.String()
	}
	return "the server"
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// last is the innermost message of err (what the system said), without the
// chain of operations before it.
func last(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			break
		}
		err = u
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return msg
}
