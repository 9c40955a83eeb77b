package revtunnel_test

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
)

// udpOrigin is a machine's UDP service: it echoes every datagram, except
// "seq:N" ones, which it only counts (each N once).
type udpOrigin struct {
	conn *net.UDPConn
	mu   sync.Mutex
	seen map[int]bool
}

func startUDPOrigin(t *testing.T) *udpOrigin {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadBuffer(4 << 20)
	o := &udpOrigin{conn: c, seen: map[int]bool{}}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if s, ok := strings.CutPrefix(string(buf[:n]), "seq:"); ok {
				if i, err := strconv.Atoi(s); err == nil {
					o.mu.Lock()
					o.seen[i] = true
					o.mu.Unlock()
				}
				continue
			}
			c.WriteToUDP(buf[:n], from)
		}
	}()
	return o
}

func (o *udpOrigin) port() int { return o.conn.LocalAddr().(*net.UDPAddr).Port }

func (o *udpOrigin) counted() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.seen)
}

// roundTrip sends p and waits up to wait for the same bytes back.
func roundTrip(c net.Conn, p []byte, wait time.Duration) error {
	if _, err := c.Write(p); err != nil {
		return err
	}
	buf := make([]byte, 2048)
	deadline := time.Now().Add(wait)
	for {
		c.SetReadDeadline(deadline)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		// A late answer to an earlier try may come first: skip it.
		if bytes.Equal(buf[:n], p) {
			return nil
		}
	}
}

// TestRealEngineUDP: a udp tunnel made through the API carries datagrams
// through real frps and frpc on the VPS's loopback. Every size from 1 to
// 1,400 bytes makes the round trip whole, and 10,000 datagrams sent at
// up to 5,000 a second, 100 in flight at most, all arrive.
func TestRealEngineUDP(t *testing.T) {
	e := startEngine(t)
	reg := e.register("gamer")
	client := e.runClient("gamer", reg.ClientConfig)
	eventually(t, 15*time.Second, "bytes through gamer's ssh tunnel port", func() error { return echo(reg.TunnelPort) })
	id := int64(e.machineByName("gamer")["id"].(float64))
	origin := startUDPOrigin(t)

	var tun struct {
		ID         int64  `json:"id"`
		Kind       string `json:"kind"`
		RemotePort int    `json:"remote_port"`
		Address    string `json:"address"`
		Status     string `json:"status"`
	}
	if code, _ := e.c.Call("POST", "/api/tunnels", map[string]any{"machine_id": id, "name": "game", "kind": "udp", "local_port": origin.port()}, &tun); code != 201 {
		t.Fatalf("create udp tunnel: %d", code)
	}
	if want := fmt.Sprintf("127.0.0.1:%d", tun.RemotePort); tun.Kind != "udp" || tun.Address != want {
		t.Fatalf("udp tunnel = %+v, want kind udp at %s", tun, want)
	}
	var conf string
	if code, _ := e.c.Call("GET", fmt.Sprintf("/api/machines/%d/revtunnel-client", id), nil, &conf); code != 200 {
		t.Fatalf("client config: %d %s", code, conf)
	}
	if !strings.Contains(conf, "type = 'udp'") {
		t.Fatalf("the client config has no udp proxy:\n%s", conf)
	}
	client.Stop()
	e.runClient("gamer", conf)

	c, err := net.Dial("udp", fmt.Sprintf("127.0.0.1:%d", tun.RemotePort))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	took := eventually(t, 15*time.Second, "a datagram through the udp tunnel", func() error {
		return roundTrip(c, []byte("hello"), 300*time.Millisecond)
	})
	t.Logf("the udp tunnel carried its first datagram %v after frpc started", took.Round(time.Millisecond))
	if err := e.hasEvent(revtunnel.EventTunnelUp, fmt.Sprintf("port %d", tun.RemotePort)); err != nil {
		t.Fatal(err)
	}

	// Every size from 1 to 1,400 bytes, each with its own content, comes
	// back whole. A datagram may be lost: each size has three tries.
	sent := 0
	for n := 1; n <= 1400; n++ {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(n + i)
		}
		var err error
		for try := 0; try < 3; try++ {
			sent++
			if err = roundTrip(c, p, time.Second); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("a %d-byte datagram did not come back whole in 3 tries: %v", n, err)
		}
	}
	t.Logf("sizes 1 to 1,400 bytes: %d datagrams sent for 1,400 round trips (%d lost)", sent, sent-1400)

	// 10,000 datagrams at up to 5,000 a second, one way, all arrive. They
	// go in windows of 100, each sent when the last has arrived whole: no
	// more than 100 are in flight, which every socket buffer on the way
	// holds (about 1 KB of buffer each). So a machine busy with other work
	// delays them, and a lost one is the tunnel's.
	const total, rate, window = 10000, 5000, 100
	start := time.Now()
	for i := 0; i < total; i++ {
		if wait := time.Until(start.Add(time.Duration(i) * time.Second / rate)); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := fmt.Fprintf(c, "seq:%d", i); err != nil {
			t.Fatal(err)
		}
		if sent := i + 1; sent%window == 0 || sent == total {
			// Polled every millisecond: the window is 20 ms of sending.
			deadline := time.Now().Add(10 * time.Second)
			for origin.counted() < sent && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if n := origin.counted(); n < sent {
				t.Fatalf("%d of the first %d datagrams arrived within 10 s", n, sent)
			}
		}
	}
	sending := time.Since(start)
	t.Logf("10,000 datagrams sent in %v, all arrived through the tunnel", sending.Round(time.Millisecond))

	var got struct {
		Status string `json:"status"`
	}
	if code, _ := e.c.Call("GET", fmt.Sprintf("/api/tunnels/%d", tun.ID), nil, &got); code != 200 || got.Status != "active" {
		t.Fatalf("udp tunnel after traffic: %d %+v", code, got)
	}
}
