package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// served is one of the daemon's HTTP servers (the dashboard, frps's
// plugin calls, the access gate Caddy asks) on its listeners, with its
// connections followed so that a stop serves every request accepted.
type served struct {
	name  string
	srv   *http.Server
	ls    []net.Listener
	conns conns
}

// serveOn serves srv on each of ls; when a listener's Serve returns, its
// error goes to errc (unless nil).
func serveOn(name string, srv *http.Server, errc chan<- error, ls ...net.Listener) *served {
	s := &served{name: name, srv: srv, ls: ls}
	srv.ConnState = s.conns.track
	for _, l := range ls {
		go func() {
			err := srv.Serve(l)
			if errc != nil {
				errc <- err
			}
		}()
	}
	return s
}

// stopAll stops every server at once, each as stopServing does; one
// still busy when ctx ends has its connections closed.
func stopAll(ctx context.Context, log *slog.Logger, ss ...*served) {
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := stopServing(ctx, s.srv, s.ls, &s.conns); err != nil {
				log.Warn("drain timed out; closing connections", "server", s.name, "err", err)
				s.srv.Close()
			}
		}()
	}
	wg.Wait()
}

// conns follows a server's connections (http.Server.ConnState), so
// that a stop serves every request already accepted.
type conns struct {
	mu sync.Mutex
	m  map[net.Conn]connInfo
}

type connInfo struct {
	state http.ConnState
	since time.Time
}

// track is the server's ConnState hook.
func (c *conns) track(conn net.Conn, s http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[net.Conn]connInfo{}
	}
	switch s {
	case http.StateHijacked, http.StateClosed:
		delete(c.m, conn)
	default:
		c.m[conn] = connInfo{state: s, since: time.Now()}
	}
}

// newConnWait is how long a connection that sent nothing yet is waited
// for at a stop.
const newConnWait = 2 * time.Second

// busy reports whether a connection is reading or handling a request, or
// was accepted less than newConnWait ago and may be about to send one.
func (c *conns) busy(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, i := range c.m {
		if i.state == http.StateActive || i.state == http.StateNew && now.Sub(i.since) < newConnWait {
			return true
		}
	}
	return false
}

// stopServing ends srv's serving without dropping a request.
// The listeners close first: new connections wait in the socket's queue
// (systemd's, for the next daemon). The connections already accepted are
// served until none is busy, then Shutdown closes the idle ones.
// Shutdown alone drops a request it finds half-read: net/http closes a
// connection whose request arrives after Shutdown began, unanswered (the
// client reads EOF), which a package upgrade did to about one request in
// three hundred.
func stopServing(ctx context.Context, srv *http.Server, ls []net.Listener, c *conns) error {
	for _, l := range ls {
		l.Close()
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for c.busy(time.Now()) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	// Shutdown finds the listeners closed already: not an error here.
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
