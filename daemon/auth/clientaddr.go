package auth

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
)

// ClientAddr derives the client address of r: the TCP peer, unless the peer
// is local (the web proxy on this box), in which case the last entry of
// X-Forwarded-For, which the local proxy appended itself, is believed.
// Earlier entries are client-supplied and never trusted.
func ClientAddr(r *http.Request, isLocal func(netip.Addr) bool) netip.Addr {
	peer := peerAddr(r)
	if !peer.IsValid() || !isLocal(peer) {
		return peer
	}
	xff := r.Header.Values("X-Forwarded-For")
	if len(xff) == 0 {
		return peer
	}
	entries := strings.Split(xff[len(xff)-1], ",")
	last := strings.TrimSpace(entries[len(entries)-1])
	if a, err := validate.IP(last); err == nil {
		return a.Unmap()
	}
	return peer
}

func peerAddr(r *http.Request) netip.Addr {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap()
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap()
}
