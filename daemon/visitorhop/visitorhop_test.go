package visitorhop_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/visitorhop"
)

// frps stands in for frps's listener on 127.0.0.1: each connection's
// PROXY header is read and recorded, and its requests are answered with
// the header's source and what they carried.
type frps struct {
	port int
	mu   sync.Mutex
	// conns: the source each connection's header named, in order.
	conns []string
}

func startFrps(t *testing.T) *frps {
	t.Helper()
	// A port free on the hop's address too: the test packages run side by
	// side, and another's hop may hold 127.0.0.2 at a port whose
	// 127.0.0.1 its frps just let go.
	var ln net.Listener
	for try := 0; ln == nil; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hop, err := net.Listen("tcp", net.JoinHostPort(visitorhop.Addr, fmt.Sprint(l.Addr().(*net.TCPAddr).Port)))
		if err == nil {
			hop.Close()
			ln = l
		} else if l.Close(); try == 20 {
			t.Fatalf("no port free on both 127.0.0.1 and %s in 20 tries: %v", visitorhop.Addr, err)
		}
	}
	f := &frps{port: ln.Addr().(*net.TCPAddr).Port}
	testutil.AcceptEach(t, ln, func(c net.Conn) { go f.serve(c) })
	return f
}

func (f *frps) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	h, err := proxyproto.Read(br)
	if err != nil {
		fmt.Fprintf(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 9\r\nConnection: close\r\n\r\nno header")
		return
	}
	src := h.SourceAddr.String()
	f.mu.Lock()
	f.conns = append(f.conns, fmt.Sprintf("v%d %s", h.Version, src))
	f.mu.Unlock()
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		body := fmt.Sprintf("src=%s host=%s xff=%q real=%q visitor=%q", src, req.Host, req.Header.Get("X-Forwarded-For"),
			req.Header.Get("X-Real-IP"), req.Header.Get(visitorhop.VisitorHeader))
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
}

func (f *frps) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.conns...)
}

// get sends one request to the hop on port, as Caddy does, from visitor
// (no header when visitor is empty), on client's connections.
func get(t *testing.T, client *http.Client, port int, visitor string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+net.JoinHostPort(visitorhop.Addr, strconv.Itoa(port))+"/x", nil)
	req.Host = "app.example.test"
	req.Header.Set("X-Forwarded-For", "203.0.113.9")
	req.Header.Set("X-Real-IP", "203.0.113.9")
	if visitor != "" {
		req.Header.Set(visitorhop.VisitorHeader, visitor)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("through the hop: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// TestEachVisitorHasItsOwnConnections: the web proxy's one connection
// carries two visitors' requests; the service gets each on a connection
// of its own whose header names that visitor, and the request as the web
// proxy sent it (Host, X-Forwarded-For, X-Real-IP), without the hop's
// header. Without a visitor (a health check) the header names the web
// proxy. Set closes a port that is no longer asked for.
func TestEachVisitorHasItsOwnConnections(t *testing.T) {
	f := startFrps(t)
	h := &visitorhop.Hop{}
	t.Cleanup(h.Close)
	if err := h.Set(map[int]string{f.port: "v2"}); err != nil {
		t.Fatal(err)
	}
	caddy := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	a, b := "198.51.100.7:40001", "[2001:db8::5]:40002"
	for i := 0; i < 3; i++ {
		for _, v := range []string{a, b} {
			want := fmt.Sprintf(`src=%s host=app.example.test xff="203.0.113.9" real="203.0.113.9" visitor=""`, v)
			if got := get(t, caddy, f.port, v); got != want {
				t.Fatalf("request %d from %s: the service got %s, want %s", i, v, got, want)
			}
		}
	}
	if got := strings.Join(f.seen(), ", "); got != "v2 "+a+", v2 "+b {
		t.Fatalf("connections to the tunnel: %s (want one per visitor, kept)", got)
	}
	if n := h.Visitors(f.port); n != 2 {
		t.Fatalf("visitors kept: %d", n)
	}
	got := get(t, caddy, f.port, "")
	if !strings.HasPrefix(got, "src=127.0.0.1:") {
		t.Fatalf("without a visitor (the web proxy's own check): %s", got)
	}

	// Version 1, after a change of version: the port starts afresh.
	if err := h.Set(map[int]string{f.port: "v1"}); err != nil {
		t.Fatal(err)
	}
	caddy = &http.Client{Timeout: 15 * time.Second}
	get(t, caddy, f.port, a)
	if s := f.seen(); s[len(s)-1] != "v1 "+a {
		t.Fatalf("after the change to v1: %v", s)
	}
	if err := h.Set(nil); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(visitorhop.Addr, strconv.Itoa(f.port)), time.Second); err == nil {
		c.Close()
		t.Fatal("the port is still served after it was removed")
	}
}

// TestSetReportsAPortItCannotTake: a port someone else holds is reported
// by name, and the other ports are served anyway.
func TestSetReportsAPortItCannotTake(t *testing.T) {
	f := startFrps(t)
	busy, err := net.Listen("tcp", visitorhop.Addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	taken := busy.Addr().(*net.TCPAddr).Port
	h := &visitorhop.Hop{}
	t.Cleanup(h.Close)
	err = h.Set(map[int]string{f.port: "v2", taken: "v2"})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("listening on %s:%d for a tunnel's visitors", visitorhop.Addr, taken)) ||
		strings.Contains(err.Error(), fmt.Sprintf(":%d ", f.port)) {
		t.Fatalf("Set = %v, want an error naming port %d only", err, taken)
	}
	if got := get(t, &http.Client{Timeout: 15 * time.Second}, f.port, "192.0.2.1:5"); !strings.HasPrefix(got, "src=192.0.2.1:5 ") {
		t.Fatalf("the other port: %s", got)
	}
	if got := string(visitorhop.Render(h.Ports())); got != fmt.Sprintf("%d v2\n", f.port) {
		t.Fatalf("ports served: %q", got)
	}
}
