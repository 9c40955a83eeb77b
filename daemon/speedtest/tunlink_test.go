package speedtest_test

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// A link emulated in this test process, for kernels without netem (its
// qdisc is not built in every kernel): two TUN devices, one here and one
// in the machine's namespace, and a goroutine each way that moves every
// packet from one to the other as netem's "rate R delay D limit L" would:
// it leaves after the packets before it, once its own bits went at R
// (serialization), reaches the other side D later, and is dropped while
// L packets wait. The kernels on both sides, their TCP, and everything
// above are the real ones.

// openTUN creates TUN device name (IP packets, no header) and returns its
// file; the device goes when the file is closed.
func openTUN(t *testing.T, name string) *os.File {
	t.Helper()
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("the kernel has no netem qdisc (sch_netem) to shape the link, and no /dev/net/tun to emulate it: %v", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		t.Fatal(err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		t.Fatalf("TUNSETIFF %s: %v", name, err)
	}
	// Non-blocking: reads wait in Go's poller, and Close ends them.
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "/dev/net/tun:"+name)
	t.Cleanup(func() { f.Close() })
	return f
}

// newTUNLink joins namespace ns to this one by an emulated link (see
// above) on 10.231.<sub>.1 (here) and .2 (ns).
func newTUNLink(t *testing.T, ns string, sub int, shape linkShape) shapedLink {
	t.Helper()
	n := testutil.NetnsSeq()
	here, there := fmt.Sprintf("tst%dh%d", os.Getpid()%10000, n), fmt.Sprintf("tst%dp%d", os.Getpid()%10000, n)
	a, b := openTUN(t, here), openTUN(t, there)
	l := shapedLink{Host: fmt.Sprintf("10.231.%d.1", sub), Peer: fmt.Sprintf("10.231.%d.2", sub), How: "TUN devices, shaped in the test (no netem in this kernel)"}
	testutil.Run(t, "ip", "link", "set", there, "netns", ns)
	testutil.Run(t, "ip", "addr", "add", l.Host, "peer", l.Peer, "dev", here)
	testutil.Run(t, "ip", "-n", ns, "addr", "add", l.Peer, "peer", l.Host, "dev", there)
	testutil.Run(t, "ip", "link", "set", here, "mtu", fmt.Sprint(shape.mtu), "up")
	testutil.Run(t, "ip", "-n", ns, "link", "set", there, "mtu", fmt.Sprint(shape.mtu), "up")
	var dropped atomic.Int64
	go carry(a, b, shape, &dropped)
	go carry(b, a, shape, &dropped)
	t.Cleanup(func() {
		if n := dropped.Load(); n > 0 {
			t.Logf("the emulated link dropped %d packets at its queue limit", n)
		}
	})
	return l
}

type inFlight struct {
	packet []byte
	at     time.Time // when it reaches the other side
}

// carry moves packets from one device to the other until either closes.
func carry(from, to *os.File, shape linkShape, dropped *atomic.Int64) {
	queue := make(chan inFlight, shape.limit)
	go func() {
		for p := range queue {
			if d := time.Until(p.at); d > 0 {
				time.Sleep(d)
			}
			if _, err := to.Write(p.packet); errors.Is(err, os.ErrClosed) {
				return
			}
		}
	}()
	defer close(queue)
	var free time.Time // when the link finishes sending what it holds
	perByte := time.Second * 8 / time.Duration(shape.rateMbit*1_000_000)
	for {
		buf := make([]byte, 65536)
		n, err := from.Read(buf)
		if err != nil {
			return
		}
		now := time.Now()
		free = maxTime(free, now).Add(time.Duration(n) * perByte)
		select {
		case queue <- inFlight{buf[:n], free.Add(shape.delay)}:
		default:
			free = free.Add(-time.Duration(n) * perByte) // dropped: never sent
			dropped.Add(1)
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
