package yamux

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
)

// countingConn counts the writes that reach the connection once armed, and
// holds the first of them until release is closed.
type countingConn struct {
	io.ReadWriteCloser
	mu      sync.Mutex
	armed   bool
	writes  int
	first   chan struct{} // closed when the first write arrives
	release chan struct{}
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if !c.armed {
		c.mu.Unlock()
		return c.ReadWriteCloser.Write(p)
	}
	c.writes++
	n := c.writes
	c.mu.Unlock()
	if n == 1 {
		close(c.first)
		<-c.release
	}
	return c.ReadWriteCloser.Write(p)
}

func (c *countingConn) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

// TestSendLoopWritesFramesTogether: a frame's header and body reach the
// connection in one write, and frames that wait while a write is under way
// go out together in the next, each arriving whole and in order on its
// stream.
func TestSendLoopWritesFramesTogether(t *testing.T) {
	c1, c2 := testConnTCP(t)
	conn := &countingConn{ReadWriteCloser: c1, first: make(chan struct{}), release: make(chan struct{})}
	conf := testConf()
	conf.EnableKeepAlive = false
	client, err := Client(conn, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := Server(c2, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

	const streams = 10
	var out []*Stream
	for range streams {
		s, err := client.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	// OpenStream returns once its SYN is written, so the client has
	// nothing more to write but the frames below; the server's ACKs go the
	// other way. From here on the first frame is held in the connection
	// while the others queue.
	var accepted []*Stream
	for range streams {
		s, err := server.AcceptStream()
		if err != nil {
			t.Fatal(err)
		}
		accepted = append(accepted, s)
	}
	conn.mu.Lock()
	conn.armed = true
	conn.mu.Unlock()
	var wg sync.WaitGroup
	msg := func(i int) []byte { return []byte(fmt.Sprintf("message %d of stream %d", i, i)) }
	wg.Add(1)
	go func() { defer wg.Done(); out[0].Write(msg(0)) }()
	<-conn.first
	for i := 1; i < streams; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); out[i].Write(msg(i)) }()
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(client.sendCh) < streams-1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d frames queued", len(client.sendCh), streams-1)
		}
		time.Sleep(time.Millisecond)
	}
	close(conn.release)
	wg.Wait()

	for _, s := range accepted {
		i := int(s.StreamID()-1) / 2 // client streams are 1, 3, 5, …
		want := msg(i)
		got := make([]byte, len(want))
		if _, err := io.ReadFull(s, got); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("stream %d read %q, want %q", i, got, want)
		}
	}
	if n := conn.count(); n != 2 {
		t.Fatalf("%d frames took %d writes, want 2: the held one, then the %d that waited, together", streams, n, streams-1)
	}
}

// TestSendLoopBulkArrivesWhole: frames larger than a batch still go out
// whole and in order.
func TestSendLoopBulkArrivesWhole(t *testing.T) {
	client, server := testClientServer(t)
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i * 7 % 251)
	}
	s, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	go func() { s.Write(data); s.Close() }()
	r, err := server.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, want the %d written, unchanged", len(got), len(data))
	}
}
