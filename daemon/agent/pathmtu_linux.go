package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// IP and ICMP headers, which an echo's payload leaves room for.
const (
	echoOverhead4 = 20 + 8
	echoOverhead6 = 40 + 8
)

// pathMTU is the kernel's path MTU toward host, read from a UDP socket
// connected to it (nothing is sent). The kernel lowers it below the link's
// MTU when a smaller link on the way said so (ICMP "fragmentation needed"
// or "packet too big", which the speed test's transfers draw out).
func pathMTU(host string) (PathMTU, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return PathMTU{}, err
	}
	if len(addrs) == 0 {
		return PathMTU{}, fmt.Errorf("%s has no address", host)
	}
	a := addrs[0].Unmap()
	network, level, opt, overhead := "udp6", unix.IPPROTO_IPV6, unix.IPV6_MTU, echoOverhead6
	if a.Is4() {
		network, level, opt, overhead = "udp4", unix.IPPROTO_IP, unix.IP_MTU, echoOverhead4
	}
	// Port 9 (discard): a connected UDP socket sends nothing until written to.
	c, err := net.Dial(network, netip.AddrPortFrom(a, 9).String())
	if err != nil {
		return PathMTU{}, err
	}
	defer c.Close()
	raw, err := c.(*net.UDPConn).SyscallConn()
	if err != nil {
		return PathMTU{}, err
	}
	mtu, serr := 0, error(nil)
	if err := raw.Control(func(fd uintptr) { mtu, serr = unix.GetsockoptInt(int(fd), level, opt) }); err != nil {
		return PathMTU{}, err
	}
	if serr != nil {
		return PathMTU{}, fmt.Errorf("getsockopt MTU: %w", serr)
	}
	if mtu <= overhead {
		return PathMTU{}, fmt.Errorf("the kernel says the path MTU is %s bytes", strconv.Itoa(mtu))
	}
	return PathMTU{Address: a.String(), MTU: mtu, Payload: mtu - overhead}, nil
}
