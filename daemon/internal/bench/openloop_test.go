package bench

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestOpenLoadSendsEveryRequestOnTime: every request due is sent, with the
// headers asked for, and answered.
func TestOpenLoadSendsEveryRequestOnTime(t *testing.T) {
	var n atomic.Int64
	var badHost atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "app.bench.test" || r.Header.Get("Cookie") != "s=1" {
			badHost.Store(r.Host + " " + r.Header.Get("Cookie"))
		}
		n.Add(1)
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	h := http.Header{"Host": {"app.bench.test"}, "Cookie": {"s=1"}}
	start := time.Now()
	l := openLoad(srv.URL+"/x?y=1", h, 400, 500*time.Millisecond)
	took := time.Since(start)
	if l.Requests != 200 || n.Load() != 200 || l.Success != 1 || len(l.Errors) != 0 {
		t.Fatalf("requests %d, served %d, success %v, errors %v", l.Requests, n.Load(), l.Success, l.Errors)
	}
	if v := badHost.Load(); v != nil {
		t.Fatalf("the server saw %q", v)
	}
	// 200 requests at 400/s: the last is due at 497.5 ms, so the run
	// cannot end sooner (a generator that sent them all at once would).
	if took < 490*time.Millisecond {
		t.Fatalf("200 requests at 400/s took %v", took)
	}
	if l.P99 <= 0 || l.Mean <= 0 || l.P99 < l.Mean/10 {
		t.Fatalf("p99 %v, mean %v", l.P99, l.Mean)
	}
}

// TestOpenLoadCountsFromTheDueTime: a server that answers slower than the
// rate makes requests wait; their latency counts from when they were due,
// and more connections are opened to send them.
func TestOpenLoadCountsFromTheDueTime(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(40 * time.Millisecond)
		w.Write([]byte("slow"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	l := openLoad(srv.URL, nil, 1000, 300*time.Millisecond)
	if l.Success != 1 {
		t.Fatalf("success %v, errors %v", l.Success, l.Errors)
	}
	if l.P99 < 40*time.Millisecond {
		t.Fatalf("p99 %v under the server's own 40 ms", l.P99)
	}
	// 1,000 a second, each held 40 ms: about 40 in flight at once.
	if c := conns.Load(); c < 40 {
		t.Fatalf("%d connections for about 40 requests in flight", c)
	}
	// A request sent late (its worker was busy) counts the wait.
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer fast.Close()
	work := make(chan time.Time, 1)
	work <- time.Now().Add(-100 * time.Millisecond)
	close(work)
	r := openWorker(strings.TrimPrefix(fast.URL, "http://"), []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), work)
	if len(r.latencies) != 1 || r.latencies[0] < 100*time.Millisecond {
		t.Fatalf("latencies %v, errors %v: a request due 100 ms ago", r.latencies, r.errors)
	}
}

// TestOpenLoadReportsFailures: an error status and a refused connection
// are failures, named.
func TestOpenLoadReportsFailures(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusBadGateway)
	}))
	l := openLoad(srv.URL, nil, 100, 200*time.Millisecond)
	srv.Close()
	if l.Success != 0 || len(l.Errors) != 1 || l.Errors[0] != "502 Bad Gateway" {
		t.Fatalf("success %v, errors %q", l.Success, l.Errors)
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	l = openLoad(fmt.Sprintf("http://127.0.0.1:%d/", port), nil, 100, 100*time.Millisecond)
	if l.Success != 0 || len(l.Errors) == 0 || !strings.Contains(l.Errors[0], "connection refused") {
		t.Fatalf("success %v, errors %q", l.Success, l.Errors)
	}
}
