package bench

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"
)

// The UDP figure: datagrams through a udp tunnel (frps's udp proxy on the
// VPS, frpc on the machine) against the same datagrams sent straight to the
// machine's port. iperf3 cannot do it: its UDP test needs a TCP control
// connection on the same port number, and a tunnel's TCP and UDP ports are
// never the same.

// udpSize is each datagram's payload: under a 1,500-byte MTU with room
// for headers, the size a game or VoIP service sends at most.
const udpSize = 1200

// udpSink is the machine's UDP service: it counts what arrives.
type udpSink struct {
	conn             *net.UDPConn
	datagrams, bytes atomic.Int64
}

func startUDPSink() (*udpSink, error) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	c.SetReadBuffer(4 << 20)
	s := &udpSink{conn: c}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			s.datagrams.Add(1)
			s.bytes.Add(int64(n))
		}
	}()
	return s, nil
}

func (s *udpSink) port() int { return s.conn.LocalAddr().(*net.UDPAddr).Port }

// udpTurn is what one path carried in one turn.
type udpTurn struct {
	sent, got int64         // datagrams
	bytes     int64         // bytes that arrived
	took      time.Duration // sending time
}

// sendUDP sends udpSize-byte datagrams to port for d: at rate a second,
// or as fast as one socket can when rate is 0. It waits for the last ones
// to arrive (up to 300 ms) and counts what did.
func (s *udpSink) sendUDP(port, rate int, d time.Duration) (udpTurn, error) {
	c, err := net.Dial("udp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return udpTurn{}, err
	}
	defer c.Close()
	p := make([]byte, udpSize)
	g0, b0 := s.datagrams.Load(), s.bytes.Load()
	var t udpTurn
	start := time.Now()
	end := start.Add(d)
	for time.Now().Before(end) {
		n := 64
		if rate > 0 {
			// Due so far, less what was sent: bursts of at most a
			// millisecond's worth.
			due := int64(time.Since(start).Seconds()*float64(rate)) + 1
			n = int(due - t.sent)
			if n <= 0 {
				time.Sleep(time.Millisecond)
				continue
			}
		}
		for i := 0; i < n; i++ {
			// A full socket buffer on the way is a lost datagram, not
			// an error of the figure (ECONNREFUSED from a missing
			// listener is, and ends it below).
			if _, err := c.Write(p); err != nil {
				if t.sent == 0 {
					return t, err
				}
			}
			t.sent++
		}
	}
	t.took = time.Since(start)
	// The last datagrams are on their way: wait until nothing more comes.
	last, quiet := s.datagrams.Load(), time.Now()
	for time.Since(quiet) < 100*time.Millisecond && time.Since(start) < d+300*time.Millisecond {
		time.Sleep(10 * time.Millisecond)
		if n := s.datagrams.Load(); n != last {
			last, quiet = n, time.Now()
		}
	}
	t.got, t.bytes = s.datagrams.Load()-g0, s.bytes.Load()-b0
	return t, nil
}

// udpPacedRate is the constant rate of the figure's second measure: about
// 96 Mbit/s of 1,200-byte datagrams, a busy game or VoIP server.
const udpPacedRate = 10000

// UDPThroughput: as many datagrams as one socket sends, through the tunnel
// and straight to the machine's port in turns of a second; then the
// tunnel at a constant udpPacedRate, and what was lost.
func (w *World) UDPThroughput() Row {
	row := Row{
		Figure:   fmt.Sprintf("UDP through frps/frpc / direct loopback (%d-byte datagrams, as fast as one socket sends)", udpSize),
		Goal:     "reported",
		Baseline: "the same sender straight to the machine's port, same run",
	}
	turns := max(1, int(w.opts.Duration/time.Second))
	ports := []int{w.UDPTunnel.RemotePort, w.udp.port()}
	// frpc opens the udp proxy with the others, but after a restart (the
	// disconnect figure's) it may not be there yet.
	if err := waitFor(context.Background(), 15*time.Second, "a datagram through the udp tunnel", func() error {
		t, err := w.udp.sendUDP(ports[0], 1000, 50*time.Millisecond)
		if err == nil && t.got == 0 {
			err = fmt.Errorf("none of %d arrived", t.sent)
		}
		return err
	}); err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	var sum [2]udpTurn
	var frpsCPU time.Duration
	for i := 0; i < turns; i++ {
		for j, port := range ports {
			c0 := w.FRPS.CPU()
			t, err := w.udp.sendUDP(port, 0, time.Second)
			if err != nil {
				row.Measured = "error: " + err.Error()
				return row
			}
			if j == 0 {
				frpsCPU += w.FRPS.CPU() - c0
			}
			sum[j].sent += t.sent
			sum[j].got += t.got
			sum[j].bytes += t.bytes
			sum[j].took += t.took
		}
	}
	mbps := func(t udpTurn) float64 { return float64(t.bytes) * 8 / t.took.Seconds() / 1e6 }
	loss := func(t udpTurn) float64 { return 100 * (1 - ratio(float64(t.got), float64(t.sent))) }
	paced, err := w.udp.sendUDP(ports[0], udpPacedRate, time.Duration(turns)*time.Second)
	if err != nil {
		row.Measured = "error: " + err.Error()
		return row
	}
	// The highest constant rate with under 1 % lost, doubling from
	// udpPacedRate.
	held := 0
	if loss(paced) < 1 {
		held = udpPacedRate
		for rate := 2 * udpPacedRate; rate <= 16*udpPacedRate; rate *= 2 {
			t, err := w.udp.sendUDP(ports[0], rate, time.Duration(turns)*time.Second)
			if err != nil || loss(t) >= 1 {
				break
			}
			held = rate
		}
	}
	perGB := 0.0
	if sum[0].bytes > 0 {
		perGB = frpsCPU.Seconds() / (float64(sum[0].bytes) / 1e9)
	}
	row.Value = ratio(mbps(sum[0]), mbps(sum[1]))
	row.Met = true
	row.Measured = fmt.Sprintf("%.0f / %.0f Mbit/s arrived (%.1f%% / %.1f%% of the datagrams sent were lost); frps's CPU per GB carried %.1f s; at a constant %d datagrams/s (%.0f Mbit/s) through the tunnel: %.2f%% lost; the highest constant rate with under 1%% lost: %d datagrams/s (%.0f Mbit/s)",
		mbps(sum[0]), mbps(sum[1]), loss(sum[0]), loss(sum[1]), perGB, udpPacedRate, float64(udpPacedRate*udpSize*8)/1e6, loss(paced),
		held, float64(held*udpSize*8)/1e6)
	row.Measured += "; frpc on frp's wire protocol " + w.wire
	row.Means = fmt.Sprintf("UDP through the tunnel: about %.0f Mbit/s of %d-byte datagrams for one machine; at %d datagrams a second, %.2f%% are lost.",
		mbps(sum[0]), udpSize, udpPacedRate, loss(paced))
	return row
}
