package yamux

import (
	"net"
	"reflect"
	"syscall"
)

// corker returns a function that sets or clears TCP_CORK on the TCP
// connection under conn, or nil when there is none to be found.
//
// Over TLS, one write of a batch larger than a record becomes one record
// and one write(2) per 16 KiB, and the last record of a frame is often a
// few bytes: the 12-byte header of a 16 KiB body spills into a record of
// its own. With the socket corked for the length of the batch, the kernel
// sends the records as one segment instead of one each, which on a busy
// tunnel is one wake-up of the far end instead of three.
//
// The TCP connection sits under TLS (NetConn) and under the wrappers frp
// puts around it, which embed it as their exported Conn field; corker
// looks through both, a few levels deep.
func corker(conn any) func(on bool) {
	for depth := 0; depth < 8 && conn != nil; depth++ {
		switch c := conn.(type) {
		case *net.TCPConn:
			raw, err := c.SyscallConn()
			if err != nil {
				return nil
			}
			return func(on bool) {
				v := 0
				if on {
					v = 1
				}
				_ = raw.Control(func(fd uintptr) {
					_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK, v)
				})
			}
		case interface{ NetConn() net.Conn }:
			conn = c.NetConn()
		default:
			v := reflect.ValueOf(conn)
			if v.Kind() == reflect.Pointer {
				v = v.Elem()
			}
			if v.Kind() != reflect.Struct {
				return nil
			}
			f, ok := v.Type().FieldByName("Conn")
			if !ok || !f.Anonymous || !f.IsExported() {
				return nil
			}
			conn = v.FieldByIndex(f.Index).Interface()
		}
	}
	return nil
}
