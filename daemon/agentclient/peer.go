package agentclient

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/vishvananda/netlink"
)

// PeerUID is the uid that owns the other end of conn, a TCP connection
// within this host (the daemon to 127.0.0.1:<agent port>): the socket
// whose local address is conn's remote one and whose remote address is
// conn's local one, found in the kernel's socket table through netlink
// sock_diag, which needs no privilege. That socket was accepted by the
// listener on the agent port and carries its owner's uid.
func PeerUID(conn net.Conn) (uint32, error) {
	local, ok1 := conn.LocalAddr().(*net.TCPAddr)
	remote, ok2 := conn.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("not a TCP connection: %s to %s", conn.LocalAddr(), conn.RemoteAddr())
	}
	s, err := netlink.SocketGet(remote, local)
	if err != nil {
		return 0, fmt.Errorf("look up the socket behind %s in the kernel's socket table (sock_diag): %w", remote, err)
	}
	// The kernel matches a lookup by ports; the addresses must match too.
	if !s.ID.Source.Equal(remote.IP) || int(s.ID.SourcePort) != remote.Port ||
		!s.ID.Destination.Equal(local.IP) || int(s.ID.DestinationPort) != local.Port {
		return 0, fmt.Errorf("the kernel's socket table has no socket %s to %s (found %s:%d to %s:%d)",
			remote, local, s.ID.Source, s.ID.SourcePort, s.ID.Destination, s.ID.DestinationPort)
	}
	return s.UID, nil
}

// ProcessUID is the real uid of process pid, from /proc/<pid>/status.
func ProcessUID(pid int) (uint32, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("Uid:")); ok {
			f := bytes.Fields(rest)
			if len(f) > 0 {
				uid, err := strconv.ParseUint(string(f[0]), 10, 32)
				if err == nil {
					return uint32(uid), nil
				}
			}
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no Uid line", pid)
}
