// Package store owns the database, embedded SQLite by default or a shared
// PostgreSQL: connection options, migrations and the small per-entity query
// files that the domain packages call. It is the only package that knows
// which of the two it talks to.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" driver
)

// DBFile is the database's file name inside the data directory.
const DBFile = "tunnelsvc.db"

// Store is the daemon's database handle. It is safe for concurrent use.
type Store struct {
	db *sql.DB
	// pg: the database is PostgreSQL at url (where names it in messages).
	pg         bool
	url, where string

	notify atomic.Pointer[notifier]
	// remote hears other processes' topics; origin tells ours apart;
	// outbox queues ours for them (PostgreSQL only).
	remote atomic.Pointer[notifier]
	// remoteLog hears other processes' operation log messages.
	remoteLog atomic.Pointer[notifier]
	origin    string
	outbox    chan notice
	quit      chan struct{}
	closeOnce sync.Once
	dir       string
	changes   changes
	settings  Memo[string, cachedSetting]
	machines  Snapshot[[]Machine]
	// edges and machineEdges: the cluster's edges and every machine's
	// connections through them, which the machine list and the plugin
	// read on every request.
	edges        Snapshot[[]Edge]
	machineEdges Snapshot[map[int64][]MachineEdge]
	// writer admits one write transaction at a time (see Tx).
	writer chan struct{}
	// txRetries counts the write transactions run again (TxRetries).
	txRetries atomic.Uint64
	// fullAt is when a write last failed for lack of space (Unix ns), 0
	// once one succeeded since; probedAt and probing pace the probe of a
	// file system that shows room again (see Space).
	fullAt, probedAt atomic.Int64
	probing          atomic.Bool
}

// dsn sets every connection option in one place: WAL so readers never block
// the writer, foreign keys on, IMMEDIATE write transactions so two writers
// queue on the busy timeout instead of failing with SQLITE_BUSY at commit.
func dsn(path string) string {
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_foreign_keys", "on")
	q.Set("_txlock", "immediate")
	q.Set("_busy_timeout", "5000")
	q.Set("_synchronous", "NORMAL")
	// Every connection keeps its prepared statements: the same few queries
	// run on each API request and plugin call, and preparing them again
	// cost more than running them.
	q.Set("_stmt_cache_size", "32")
	return "file:" + path + "?" + q.Encode()
}

// Open opens (creating if needed) the SQLite database in dataDir and
// applies every pending migration before returning.
func Open(ctx context.Context, dataDir string) (*Store, error) {
	return OpenDatabase(ctx, dataDir, "")
}

// OpenDatabase opens the database databaseURL names, or with an empty URL
// the SQLite database in dataDir (created if needed), and applies every
// pending migration before returning. A postgres:// or postgresql:// URL
// is a PostgreSQL database reached through pgx; its sslmode and other
// parameters apply as given. The URL may hold a password: no error or log
// line repeats it, they say "the database at host/dbname".
func OpenDatabase(ctx context.Context, dataDir, databaseURL string) (*Store, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if databaseURL != "" {
		return openPostgres(ctx, dataDir, databaseURL)
	}
	db, err := sql.Open("sqlite3", dsn(filepath.Join(dataDir, DBFile)))
	if err != nil {
		return nil, err
	}
	// database/sql keeps only 2 idle connections by default: under
	// concurrent requests every other connection was closed after one query
	// and opened again (with its pragmas) for the next. Keep enough for the
	// API's and the plugin's concurrency, and let them go when quiet.
	db.SetMaxIdleConns(16)
	db.SetConnMaxIdleTime(time.Minute)
	s := &Store{db: db, dir: dataDir, writer: make(chan struct{}, 1)}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return s, nil
}

// DB exposes the handle to the domain packages' query files.
func (s *Store) DB() *sql.DB { return s.db }

// Ping reports whether the database answers; /healthz uses it.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	return s.queryRow(ctx, "SELECT 1").Scan(&one)
}

// Live answers the systemd watchdog: whether this process's store still
// works. On SQLite the database is a file the process holds, so a Ping
// that fails or hangs means the process is wedged and a restart frees it.
// On PostgreSQL a server that is away or slow is not the process's to fix:
// a restart would not bring it back, and would drop the tunnels, gates and
// plugin decisions answered from memory meanwhile. So a failed Ping there
// is put to the server over a connection of its own, outside the pool:
// when the server answers that one, the fault is the process's (a pool
// whose every connection is stuck), and Live says so. Running out of file
// descriptors is the process's own on both engines, as is a closed store.
func (s *Store) Live(ctx context.Context) error {
	if !s.pg {
		return s.Ping(ctx)
	}
	// Half the time for the pool, the rest for the server alone.
	pctx := ctx
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		pctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(deadline)/2))
		defer cancel()
	}
	err := s.Ping(pctx)
	if err == nil || !serverAway(err) || outOfFiles(err) {
		return err
	}
	conn, cerr := pgx.Connect(ctx, s.url)
	if cerr != nil {
		if outOfFiles(cerr) {
			return cerr
		}
		return nil // the server is away: not the process's fault
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if conn.Ping(ctx) != nil {
		return nil
	}
	return fmt.Errorf("the database answers a new connection but not the daemon's pool: %w", err)
}

// outOfFiles: the process has no file descriptor left (its own fault).
func outOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// serverAway: err says the database server did not answer (unreachable,
// refusing, restarting, or not in time), not that this process failed.
func serverAway(err error) bool {
	return Unavailable(err) || errors.Is(err, context.DeadlineExceeded)
}

// Close closes the database. Closing twice is harmless.
func (s *Store) Close() error {
	s.changes.close()
	if s.quit != nil {
		s.closeOnce.Do(func() { close(s.quit) })
	}
	return s.db.Close()
}
