package app

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStopServesARequestAlreadyAccepted: a connection accepted before the
// stop whose request arrives during it is answered, not closed unanswered
// (what http.Server.Shutdown alone does: the client reads EOF). The stop
// then ends, and a new connection is not accepted.
func TestStopServesARequestAlreadyAccepted(t *testing.T) {
	for _, plain := range []bool{false, true} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var c conns
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
			ConnState: c.track}
		go srv.Serve(l)
		conn, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		// Accepted: the server has it as new.
		deadline := time.Now().Add(5 * time.Second)
		for !c.busy(time.Now()) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		stopped := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if plain {
				stopped <- srv.Shutdown(ctx)
			} else {
				stopped <- stopServing(ctx, srv, []net.Listener{l}, &c)
			}
		}()
		time.Sleep(50 * time.Millisecond) // the stop has begun
		io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if plain {
			// How net/http behaves, which the stop must not: if this ever
			// answers, stopServing may no longer be needed.
			if err == nil {
				t.Logf("Shutdown alone answered a request that arrived during it: %s", resp.Status)
			}
		} else if err != nil || resp.StatusCode != 200 {
			t.Fatalf("a request on a connection accepted before the stop: %v %v", resp, err)
		}
		if err := <-stopped; err != nil {
			t.Fatalf("stop (plain Shutdown %v): %v", plain, err)
		}
		if !plain {
			if _, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil || !strings.Contains(err.Error(), "refused") {
				t.Fatalf("a new connection after the stop: %v", err)
			}
		}
	}
}

// TestStopAllServesEveryServer: the daemon's three servers (the dashboard,
// frps's plugin calls and the access gate Caddy asks) are stopped
// together, and a request on a connection each accepted before the stop
// is answered: a machine's login or a visitor's gate check made during a
// package upgrade is not dropped.
func TestStopAllServesEveryServer(t *testing.T) {
	var ss []*served
	var dialed []net.Conn
	for _, name := range []string{"dashboard", "frps plugin", "access gate"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := serveOn(name, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) })}, nil, l)
		ss = append(ss, s)
		conn, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		dialed = append(dialed, conn)
		for deadline := time.Now().Add(5 * time.Second); !s.conns.busy(time.Now()) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	stopped := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stopAll(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), ss...)
		close(stopped)
	}()
	time.Sleep(50 * time.Millisecond) // the stop has begun
	for i, conn := range dialed {
		io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: a request accepted before the stop: %v", ss[i].name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != ss[i].name {
			t.Fatalf("%s answered %d %q", ss[i].name, resp.StatusCode, body)
		}
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the stop did not end")
	}
	for _, s := range ss {
		if _, err := net.DialTimeout("tcp", s.ls[0].Addr().String(), time.Second); err == nil {
			t.Fatalf("%s still accepts connections after the stop", s.name)
		}
	}
}
