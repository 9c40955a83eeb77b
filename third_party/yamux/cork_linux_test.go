package yamux

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
)

// wrapped is shaped like the wrappers frp puts around a connection
// (netpkg.ContextConn, golib's SharedConn): the connection embedded as Conn.
type wrapped struct {
	net.Conn
	note string
}

func TestCorkerFindsTheTCPConnection(t *testing.T) {
	c1, _ := testConnTCP(t)
	raw := c1.(*net.TCPConn)
	// frps: TLS over a ContextConn over a SharedConn over the socket.
	if corker(tls.Server(&wrapped{Conn: &wrapped{Conn: raw}}, &tls.Config{})) == nil {
		t.Error("no TCP connection found under TLS and two wrappers")
	}
	// frpc: TLS straight over the socket.
	if corker(tls.Client(raw, &tls.Config{})) == nil {
		t.Error("no TCP connection found under TLS")
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if corker(tls.Client(&wrapped{Conn: p1}, &tls.Config{})) != nil {
		t.Error("a corker for a pipe")
	}
	if corker(&pipeConn{}) != nil {
		t.Error("a corker for a connection with no Conn to look under")
	}
}

// corkWatch records, for every write that reaches the socket, whether
// TCP_CORK was set on it at that moment.
type corkWatch struct {
	net.Conn // the *net.TCPConn, found by corker through this field
	t        *testing.T
	mu       sync.Mutex
	corked   []bool
}

func (c *corkWatch) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.corked = append(c.corked, corkOf(c.t, c.Conn.(*net.TCPConn)))
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *corkWatch) take() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.corked
	c.corked = nil
	return out
}

func corkOf(t *testing.T, c *net.TCPConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		t.Error(err)
		return false
	}
	var v int
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		v, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK)
	}); err != nil || gerr != nil {
		t.Error(err, gerr)
	}
	return v == 1
}

// TestLargeFramesAreCorked: over TLS on a TCP socket, a frame larger than a
// record (a 32 KiB body: three records, the last of them the 12 bytes that
// spill over) is written with the socket corked, so that the kernel sends
// the records together; the socket is uncorked as soon as the write
// returns, and a small frame, one record, is never corked.
func TestLargeFramesAreCorked(t *testing.T) {
	c1, c2 := testConnTCP(t)
	watch := &corkWatch{Conn: c1.(*net.TCPConn), t: t}
	// The server's TLS handshake runs on its first read.
	tlsServer := tls.Server(c2.(net.Conn), serverTLS(t))
	conf := testConf()
	conf.EnableKeepAlive = false
	client, err := Client(tls.Client(watch, &tls.Config{InsecureSkipVerify: true}), conf)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := Server(tlsServer, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

	big := bytes.Repeat([]byte("0123456789abcdef"), 2048) // 32 KiB
	got := make(chan []byte, 1)
	go func() {
		s, err := server.AcceptStream()
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(s)
		got <- b
	}()
	s, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("hello")); err != nil { // handshake and opening frame
		t.Fatal(err)
	}
	watch.take()

	if _, err := s.Write(big); err != nil {
		t.Fatal(err)
	}
	large := watch.take()
	if corkOf(t, watch.Conn.(*net.TCPConn)) {
		t.Error("the socket is still corked after the write")
	}
	if _, err := s.Write([]byte("small")); err != nil {
		t.Fatal(err)
	}
	small := watch.take()
	s.Close()
	if b := <-got; !bytes.Equal(b, append(append([]byte("hello"), big...), "small"...)) {
		t.Fatalf("received %d bytes, not the %d sent", len(b), len(big)+10)
	}
	t.Logf("writes of the 32 KiB frame, corked: %v; of the small one: %v", large, small)
	if len(large) < 3 {
		t.Fatalf("the 32 KiB frame reached the socket in %d writes; want a record each (3)", len(large))
	}
	for i, c := range large {
		if !c {
			t.Errorf("write %d of %d of the 32 KiB frame went out uncorked", i+1, len(large))
		}
	}
	if len(small) != 1 || small[0] {
		t.Errorf("the small frame: writes corked %v; want one write, uncorked", small)
	}
}

func serverTLS(t *testing.T) *tls.Config {
	cert, err := tls.LoadX509KeyPair("testdata/cert.pem", "testdata/key.pem")
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}}
}
