package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// IsPostgresURL reports whether url names a PostgreSQL database.
func IsPostgresURL(url string) bool {
	return strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://")
}

// openPostgres opens the PostgreSQL database at url through pgx's
// database/sql driver and migrates it.
func openPostgres(ctx context.Context, dataDir, url string) (*Store, error) {
	if !IsPostgresURL(url) {
		return nil, errors.New("the database URL must start with postgres:// or postgresql://")
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		// pgx's message quotes the URL (with the password masked); only
		// its reason is passed on.
		var pe *pgconn.ParseConfigError
		if errors.As(err, &pe) && pe.Unwrap() != nil {
			return nil, fmt.Errorf("the database URL cannot be read: %w", pe.Unwrap())
		}
		return nil, errors.New("the database URL cannot be read")
	}
	where := describe(cfg)
	db := stdlib.OpenDB(*cfg)
	// The pool serves the API's and the plugin's concurrency; the server
	// counts connections against max_connections, so it is bounded. Every
	// connection of a burst stays for the next one (a minute idle ends it):
	// with fewer kept idle than open, each burst past them closed the rest,
	// and the next opened them again, each a new server process (287 in a
	// 90 s run of 300 machines).
	db.SetMaxOpenConns(pgMaxConns)
	db.SetMaxIdleConns(pgMaxConns)
	db.SetConnMaxIdleTime(time.Minute)
	s := &Store{db: db, pg: true, url: url, where: where, dir: dataDir, writer: make(chan struct{}, 1)}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("the database at %s: %w", where, redact(err, url))
	}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("the database at %s: migrate: %w", where, redact(err, url))
	}
	var origin [8]byte
	rand.Read(origin[:])
	s.origin, s.outbox, s.quit = hex.EncodeToString(origin[:]), make(chan notice, 1024), make(chan struct{})
	go s.announceLoop()
	return s, nil
}

// pgMaxConns bounds one daemon's connections to PostgreSQL.
const pgMaxConns = 32

// describe names a database without its credentials: host/dbname (the
// socket directory for a Unix socket).
func describe(cfg *pgx.ConnConfig) string {
	host := cfg.Host
	if cfg.Port != 0 && cfg.Port != 5432 && !strings.HasPrefix(host, "/") {
		host = fmt.Sprintf("%s:%d", host, cfg.Port)
	}
	return host + "/" + cfg.Database
}

// redact keeps the URL out of an error's text, should a driver quote it.
func redact(err error, url string) error {
	if err == nil || !strings.Contains(err.Error(), url) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), url, "<database URL>"))
}

// changesChannel is the NOTIFY channel every committed write is announced
// on, so that every process's caches (see Changes) learn of it.
const changesChannel = "tunnelsvc_changes"

// wrote follows a statement that changed rows outside a transaction: on
// PostgreSQL it announces the commit to the other processes and counts it
// here at once.
func (s *Store) wrote(ctx context.Context) {
	if !s.pg {
		return
	}
	// Outside a transaction the statement has committed already; the
	// announcement follows it. A failure leaves the others to their next
	// notification, and this process counts the change anyway.
	s.db.ExecContext(ctx, "SELECT pg_notify('"+changesChannel+"', '')")
	s.changes.bump()
}

// committed follows a committed transaction (whose NOTIFY went out with it).
func (s *Store) committed() {
	if s.pg {
		s.changes.bump()
	}
}

// pgListen is a connection of its own, listening on changesChannel, that
// counts notifications; it reconnects with backoff when the connection is
// lost. While it is not listening every call counts as a change, as with
// noWatch.
type pgListen struct {
	cancel context.CancelFunc
	done   chan struct{}
	// events holds a value after a notification or a (re)connection.
	events chan struct{}
	live   atomic.Bool // listening
	// topic hears each announcement on topicsChannel (see Store.heard),
	// log each message on logChannel (Store.heardLog).
	topic, log func(payload string)
	// missed is called when listening starts again after the connection
	// was lost: what was announced meanwhile is gone (Store.missed).
	missed func()
}

func listenPostgres(url string, topic, log func(payload string), missed func()) watcher {
	ctx, cancel := context.WithCancel(context.Background())
	l := &pgListen{cancel: cancel, done: make(chan struct{}), events: make(chan struct{}, 1), topic: topic, log: log, missed: missed}
	go l.run(ctx, url)
	return l
}

func (l *pgListen) run(ctx context.Context, url string) {
	defer close(l.done)
	backoff := 50 * time.Millisecond
	lost := false
	for ctx.Err() == nil {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+changesChannel+"; LISTEN "+topicsChannel+"; LISTEN "+logChannel)
		}
		if err == nil {
			backoff = 50 * time.Millisecond
			l.setLive(true)
			if lost && l.missed != nil {
				l.missed()
			}
			lost = true
			for {
				n, werr := conn.WaitForNotification(ctx)
				if werr != nil {
					err = werr
					break
				}
				switch {
				case n.Channel == topicsChannel && l.topic != nil:
					l.topic(n.Payload)
				case n.Channel == logChannel && l.log != nil:
					l.log(n.Payload)
					continue // a log line changes no row
				}
				l.signal()
			}
			l.setLive(false)
		}
		if conn != nil {
			closeCtx, stop := context.WithTimeout(context.Background(), time.Second)
			conn.Close(closeCtx)
			stop()
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (l *pgListen) setLive(v bool) {
	l.live.Store(v)
	l.signal()
}

func (l *pgListen) signal() {
	select {
	case l.events <- struct{}{}:
	default:
	}
}

// written reports a notification (or a change of connection) since the
// last call, and every call while not listening. Called under changes.mu.
func (l *pgListen) written() bool {
	seen := false
	select {
	case <-l.events:
		seen = true
	default:
	}
	return seen || !l.live.Load()
}

func (l *pgListen) close() {
	l.cancel()
	<-l.done
}
