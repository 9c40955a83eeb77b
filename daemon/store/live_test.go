package store

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net"
	neturl "net/url"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// The systemd watchdog's question: the store is live while its database
// answers; on PostgreSQL also while the server is away, since a restart
// would not bring it back; never once the store itself is closed.
func TestLiveWhileTheServerIsAway(t *testing.T) {
	eachEngine(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		var proxy *pgProxy
		if db.engine == "postgres" {
			proxy = newPGProxy(t, db.url)
			db.url = proxy.url
		}
		s := db.open()
		if err := s.Live(ctx); err != nil {
			t.Fatalf("Live: %v", err)
		}
		if proxy != nil {
			proxy.cut()
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := s.Ping(cctx); !Unavailable(err) {
				t.Fatalf("Ping with the server away: %v, want it unavailable", err)
			}
			if err := s.Live(cctx); err != nil {
				t.Fatalf("Live with the server away: %v, want nil", err)
			}
		}
		s.Close()
		if err := s.Live(ctx); err == nil {
			t.Fatal("a closed store is live")
		}
	})
}

// A pool whose every connection is stuck is the process's fault, not the
// server's: the server answers a connection of its own, so Live fails and
// the watchdog restarts the daemon.
func TestLiveFailsWhenOnlyThePoolIsStuck(t *testing.T) {
	s := testDB{t: t, engine: "postgres", dir: t.TempDir(), url: testutil.PostgresURL(t)}.open()
	ctx := context.Background()
	var held []*sql.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range s.DB().Stats().MaxOpenConnections {
		c, err := s.DB().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := s.Live(cctx)
	if err == nil || !strings.Contains(err.Error(), "answers a new connection but not the daemon's pool") {
		t.Fatalf("Live with every pooled connection held: %v", err)
	}
	held[0].Close()
	held = held[1:]
	if err := s.Live(ctx); err != nil {
		t.Fatalf("Live once a connection is free: %v", err)
	}
}

func TestServerAway(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{sqlStateErr("57P03"), true},
		{context.DeadlineExceeded, true},
		{errors.New("sql: database is closed"), false},
		{sqlStateErr("42P01"), false},
	} {
		if got := serverAway(c.err); got != c.want {
			t.Errorf("serverAway(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// pgProxy stands between a store and the test PostgreSQL (on its Unix
// socket), so that a test can take the server away from one store alone.
type pgProxy struct {
	url    string
	l      net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func newPGProxy(t *testing.T, url string) *pgProxy {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	server := filepath.Join(q.Get("host"), ".s.PGSQL.5432")
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, ".s.PGSQL.5432"))
	if err != nil {
		t.Fatal(err)
	}
	q.Set("host", dir)
	u.RawQuery = q.Encode()
	p := &pgProxy{url: u.String(), l: l}
	t.Cleanup(p.cut)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", server)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				c.Close()
				up.Close()
				return
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

// cut closes the listener and every connection through it.
func (p *pgProxy) cut() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
