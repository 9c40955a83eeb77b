package bench

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The open-loop figures send requests at a constant rate, whatever the
// server's answers do, and count each request's latency from the moment it
// was due, so a server that falls behind shows it in the p99 instead of
// slowing the load down (what a closed loop such as wrk does).
//
// vegeta did this before and spent about as much processor time per
// request as Caddy itself; pinned, it shared the machine's CPU with frpc and
// the origin, and what the figures read was that CPU's queue, not the VPS's.
// openLoad does only what the figure needs: one request written as bytes,
// the answer read with net/http's parser, keep-alive connections, a new one
// only when every open one is busy.

// openLoadTimeout bounds one request: past it the request is an error.
const openLoadTimeout = 10 * time.Second

// openLoad sends GET rawURL with header ("Host" among them) at rate
// requests per second for d, over at most openConns connections.
func openLoad(rawURL string, header http.Header, rate int, d time.Duration) load {
	u, err := url.Parse(rawURL)
	if err != nil || rate <= 0 {
		return load{Errors: []string{fmt.Sprintf("open loop: URL %q, rate %d: %v", rawURL, rate, err)}}
	}
	req := requestBytes(u, header)
	total := int(float64(rate) * d.Seconds())
	if total < 1 {
		total = 1
	}
	interval := time.Second / time.Duration(rate)
	work := make(chan time.Time, total)
	results := make(chan openResult, openConns)
	var wg sync.WaitGroup
	workers := 0
	spawn := func() {
		workers++
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- openWorker(u.Host, req, work)
		}()
	}
	for i := 0; i < min(50, openConns); i++ {
		spawn()
	}
	start := time.Now()
	for i := 0; i < total; i++ {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		work <- due
		// A send to a channel that a worker waits on hands the value
		// over at once: anything left in the buffer found no idle
		// connection.
		if len(work) > 0 && workers < openConns {
			spawn()
		}
	}
	close(work)
	go func() { wg.Wait(); close(results) }()
	var all openResult
	for r := range results {
		all.latencies = append(all.latencies, r.latencies...)
		all.failed += r.failed
		for _, e := range r.errors {
			if !slices.Contains(all.errors, e) {
				all.errors = append(all.errors, e)
			}
		}
	}
	elapsed := time.Since(start)
	return all.load(total, elapsed)
}

// requestBytes is GET u with header, as HTTP/1.1 writes it.
func requestBytes(u *url.URL, header http.Header) []byte {
	host := header.Get("Host")
	if host == "" {
		host = u.Host
	}
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: tunnelsvc-bench\r\n", u.RequestURI(), host)
	names := make([]string, 0, len(header))
	for k := range header {
		if !strings.EqualFold(k, "Host") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range header[k] {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}

// openResult is what one connection's worker saw.
type openResult struct {
	latencies []time.Duration // of the successful requests
	failed    int
	errors    []string // distinct
}

func (r *openResult) fail(err error) {
	r.failed++
	if s := err.Error(); len(r.errors) < 8 && !slices.Contains(r.errors, s) {
		r.errors = append(r.errors, s)
	}
}

// openWorker sends each request due on work over its one connection,
// dialled again after an error, and reads the whole answer before taking
// the next.
func openWorker(addr string, req []byte, work <-chan time.Time) openResult {
	var r openResult
	var c net.Conn
	var br *bufio.Reader
	closeConn := func() {
		if c != nil {
			c.Close()
			c = nil
		}
	}
	defer closeConn()
	for due := range work {
		if c == nil {
			var err error
			if c, err = net.DialTimeout("tcp", addr, openLoadTimeout); err != nil {
				r.fail(err)
				continue
			}
			br = bufio.NewReaderSize(c, 16<<10)
		}
		c.SetDeadline(time.Now().Add(openLoadTimeout))
		if _, err := c.Write(req); err != nil {
			r.fail(err)
			closeConn()
			continue
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			r.fail(err)
			closeConn()
			continue
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			r.fail(err)
			closeConn()
			continue
		case resp.StatusCode < 200 || resp.StatusCode > 399:
			r.fail(fmt.Errorf("%s", resp.Status))
		default:
			r.latencies = append(r.latencies, time.Since(due))
		}
		if resp.Close {
			closeConn()
		}
	}
	return r
}

// load sums a run of total requests that took elapsed to send and answer.
func (r openResult) load(total int, elapsed time.Duration) load {
	l := load{Requests: uint64(total), Errors: r.errors}
	ok := len(r.latencies)
	if total > 0 {
		l.Success = float64(ok) / float64(total)
	}
	if elapsed > 0 {
		l.Rate = float64(ok) / elapsed.Seconds()
	}
	if ok == 0 {
		return l
	}
	slices.Sort(r.latencies)
	var sum time.Duration
	for _, v := range r.latencies {
		sum += v
	}
	l.Mean = sum / time.Duration(ok)
	// The nearest rank: the smallest latency at or above 99 % of them.
	l.P99 = r.latencies[min(ok-1, (ok*99+99)/100-1)]
	return l
}

// selfCPU is the processor time the bench process itself (the load
// generators that run in it) has used.
func selfCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
