// Package visitorhop gives an http tunnel's service the visitor's own
// address in a PROXY protocol header (v1 or v2), for tunnels that ask for
// one (proxy_protocol).
//
// frps takes an http tunnel's connections from the web proxy, so a header
// frpc wrote would name the web proxy (127.0.0.1). And the web proxy keeps
// connections to a tunnel open across visitors, while a PROXY header names
// one client per connection. So for such a tunnel the web proxy sends its
// requests here instead (Addr, on the same port numbers as frps's
// listeners), with the visitor it saw in VisitorHeader; the hop opens
// connections to frps per visitor, writes the header first on each, and
// passes the requests on. frpc carries the header as the connection's
// first bytes, and the service reads it.
//
// Everything is in memory: the hop keeps working while the database is
// slow or away, and Set (from the edge's reconcile) changes its ports.
package visitorhop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
)

// Addr is the loopback address the hop listens on. frps listens on
// 127.0.0.1; the hop takes the same port numbers on this other loopback
// address (the whole of 127.0.0.0/8 is loopback on Linux), so no port is
// allocated for it and the web proxy's balancing and health checks among
// a site's targets work as before.
const Addr = "127.0.0.2"

// FrpsAddr is where frps listens for tunnel connections.
const FrpsAddr = frpconf.ProxyBindAddr

// VisitorHeader carries the visitor the web proxy saw (its {remote}:
// "ip:port"). The web proxy sets it on every request it sends here,
// replacing any a visitor sent, and the hop removes it.
const VisitorHeader = "X-Tunnelsvc-Visitor"

// IdleVisitor is how long the connections of a visitor who sends nothing
// are kept.
const IdleVisitor = time.Minute

// MaxVisitors bounds the visitors with connections kept at once; past it,
// the one idle the longest loses its connections.
const MaxVisitors = 4096

// HTTPSPort is the destination port the header names: the web proxy's
// HTTPS port, which the visitor connected to. The destination address is
// left unspecified (0.0.0.0 or ::): the web proxy does not say which of
// the edge's addresses the visitor reached.
const HTTPSPort = 443

// Hop serves one listener per tunnel port that asks for a header.
type Hop struct {
	Log *slog.Logger
	// Listen opens a listener (net.Listen when nil; tests).
	Listen func(network, addr string) (net.Listener, error)

	mu    sync.Mutex
	ports map[int]*portHop
}

type portHop struct {
	version string
	srv     *http.Server
	pool    *pool
}

// Ports returns the ports served now and their versions, as Desired
// renders them.
func (h *Hop) Ports() map[int]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[int]string, len(h.ports))
	for p, ph := range h.ports {
		out[p] = ph.version
	}
	return out
}

// Render is the text form of a port set, one "port version" line each in
// port order: what the edge's reconcile compares.
func Render(ports map[int]string) []byte {
	keys := make([]int, 0, len(ports))
	for p := range ports {
		keys = append(keys, p)
	}
	sort.Ints(keys)
	var b strings.Builder
	for _, p := range keys {
		fmt.Fprintf(&b, "%d %s\n", p, ports[p])
	}
	return []byte(b.String())
}

// Set makes the hop serve exactly ports (frps port -> "v1" or "v2"): new
// ports are listened on, gone ones closed (their visitors' connections
// with them), and a port whose version changed starts afresh. A port that
// cannot be listened on is reported, and the others are still set.
func (h *Hop) Set(ports map[int]string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ports == nil {
		h.ports = map[int]*portHop{}
	}
	for p, ph := range h.ports {
		if v, ok := ports[p]; !ok || v != ph.version {
			ph.close()
			delete(h.ports, p)
		}
	}
	var errs []error
	for p, v := range ports {
		if _, ok := h.ports[p]; ok {
			continue
		}
		ph, err := h.open(p, v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		h.ports[p] = ph
	}
	return errors.Join(errs...)
}

// Close closes every port.
func (h *Hop) Close() { h.Set(nil) }

func (h *Hop) open(port int, version string) (*portHop, error) {
	var ver byte
	switch version {
	case "v1":
		ver = 1
	case "v2":
		ver = 2
	default:
		return nil, fmt.Errorf("port %d: PROXY protocol %q is neither v1 nor v2", port, version)
	}
	listen := h.Listen
	if listen == nil {
		listen = net.Listen
	}
	addr := net.JoinHostPort(Addr, strconv.Itoa(port))
	ln, err := listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s for a tunnel's visitors: %w", addr, err)
	}
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	target := net.JoinHostPort(FrpsAddr, strconv.Itoa(port))
	pl := newPool(target, ver)
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { rewrite(pr, target) },
		Transport:     pl,
		FlushInterval: -1, // streamed answers (server-sent events) as they come
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("visitorhop: the tunnel did not answer", "port", port, "err", err)
			http.Error(w, "the tunnel's machine did not answer", http.StatusBadGateway)
		},
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 5 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go srv.Serve(ln)
	return &portHop{version: version, srv: srv, pool: pl}, nil
}

func (ph *portHop) close() {
	ph.srv.Close()
	ph.pool.close()
}

type visitorKey struct{}

// rewrite sends the request to frps's port as the web proxy sent it: the
// same Host, and the X-Forwarded-* headers the web proxy set (Rewrite
// removes them by default). The visitor goes into the request's context
// for the pool, and its header is removed.
func rewrite(pr *httputil.ProxyRequest, target string) {
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = target
	pr.Out.Host = pr.In.Host
	for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"} {
		if v, ok := pr.In.Header[k]; ok {
			pr.Out.Header[k] = v
		}
	}
	v := visitor(pr.In.Header.Get(VisitorHeader), pr.In.RemoteAddr)
	pr.Out.Header.Del(VisitorHeader)
	pr.Out = pr.Out.WithContext(context.WithValue(pr.Out.Context(), visitorKey{}, v))
}

// visitor is the address in the web proxy's header, or, without one (the
// web proxy's own health checks), the connection's peer: the web proxy.
func visitor(header, peer string) netip.AddrPort {
	if ap, err := netip.ParseAddrPort(strings.TrimSpace(header)); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	if ap, err := netip.ParseAddrPort(peer); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
}

// pool keeps one http.Transport per visitor: its connections to frps each
// begin with that visitor's header, and are never used for another.
type pool struct {
	target string
	ver    byte

	mu     sync.Mutex
	byWho  map[netip.AddrPort]*entry
	closed bool
	stop   chan struct{}
}

type entry struct {
	tr   *http.Transport
	used time.Time
}

func newPool(target string, ver byte) *pool {
	p := &pool{target: target, ver: ver, byWho: map[netip.AddrPort]*entry{}, stop: make(chan struct{})}
	go p.sweep()
	return p
}

func (p *pool) RoundTrip(r *http.Request) (*http.Response, error) {
	who, _ := r.Context().Value(visitorKey{}).(netip.AddrPort)
	tr, err := p.transport(who)
	if err != nil {
		return nil, err
	}
	return tr.RoundTrip(r)
}

var errClosed = errors.New("the tunnel's port is no longer served")

// transport is who's transport, made when they have none.
func (p *pool) transport(who netip.AddrPort) (*http.Transport, error) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	if e, ok := p.byWho[who]; ok {
		e.used = now
		return e.tr, nil
	}
	if len(p.byWho) >= MaxVisitors {
		p.evictOldest()
	}
	e := &entry{tr: p.newTransport(who), used: now}
	p.byWho[who] = e
	return e.tr, nil
}

func (p *pool) evictOldest() {
	var oldest netip.AddrPort
	var at time.Time
	for k, e := range p.byWho {
		if at.IsZero() || e.used.Before(at) {
			oldest, at = k, e.used
		}
	}
	if e, ok := p.byWho[oldest]; ok {
		e.tr.CloseIdleConnections()
		delete(p.byWho, oldest)
	}
}

// newTransport dials frps's port and writes who's header first.
func (p *pool) newTransport(who netip.AddrPort) *http.Transport {
	var d net.Dialer
	src := net.TCPAddrFromAddrPort(who)
	dst := &net.TCPAddr{IP: net.IPv4zero, Port: HTTPSPort}
	if who.Addr().Is6() {
		dst.IP = net.IPv6unspecified
	}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, p.target)
			if err != nil {
				return nil, err
			}
			if _, err := proxyproto.HeaderProxyFromAddrs(p.ver, src, dst).WriteTo(c); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     IdleVisitor,
		DisableCompression:  true,
	}
}

// sweep forgets visitors idle for IdleVisitor.
func (p *pool) sweep() {
	t := time.NewTicker(IdleVisitor / 2)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.mu.Lock()
			for k, e := range p.byWho {
				if now.Sub(e.used) > IdleVisitor {
					e.tr.CloseIdleConnections()
					delete(p.byWho, k)
				}
			}
			p.mu.Unlock()
		}
	}
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	close(p.stop)
	for k, e := range p.byWho {
		e.tr.CloseIdleConnections()
		delete(p.byWho, k)
	}
}

// Visitors is how many visitors have connections kept on port, for the
// tests: nothing else reads it yet.
func (h *Hop) Visitors(port int) int {
	h.mu.Lock()
	ph := h.ports[port]
	h.mu.Unlock()
	if ph == nil {
		return 0
	}
	ph.pool.mu.Lock()
	defer ph.pool.mu.Unlock()
	return len(ph.pool.byWho)
}
