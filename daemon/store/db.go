package store

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Every statement of the store is written once, with `?` placeholders and
// SQL both engines run. The helpers here are the one way to the database:
// on PostgreSQL they number the placeholders ($1..$n) and turn Go bools,
// which the schema keeps in INTEGER columns, into 0 and 1.

// Engine says which database the store talks to: "sqlite" or "postgres".
// Other packages may show it; only the store acts on it.
func (s *Store) Engine() string {
	if s.pg {
		return "postgres"
	}
	return "sqlite"
}

// bind turns a query and its arguments into what the driver takes.
func (s *Store) bind(query string, args []any) (string, []any) {
	args = intBools(args)
	if s.pg {
		query = rebind(query)
	}
	return query, args
}

// intBools stores bools as the INTEGER 0 or 1 they are in the schema.
func intBools(args []any) []any {
	var out []any
	for i, a := range args {
		b, ok := a.(bool)
		if !ok {
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		if b {
			out[i] = int64(1)
		} else {
			out[i] = int64(0)
		}
	}
	if out == nil {
		return args
	}
	return out
}

// rebind numbers the `?` placeholders of query as $1, $2…, leaving string
// literals, quoted identifiers and comments alone.
func rebind(query string) string {
	if !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	n := 0
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(query) {
				if query[j] == c {
					if j+1 < len(query) && query[j+1] == c { // doubled quote
						j += 2
						continue
					}
					break
				}
				j++
			}
			if j >= len(query) {
				j = len(query) - 1
			}
			b.WriteString(query[i : j+1])
			i = j
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			j := strings.IndexByte(query[i:], '\n')
			if j < 0 {
				j = len(query) - i - 1
			}
			b.WriteString(query[i : i+j+1])
			i += j
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// query runs a statement that returns rows.
func (s *Store) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	query, args = s.bind(query, args)
	return s.db.QueryContext(ctx, query, args...)
}

// queryRow runs a statement that returns at most one row.
func (s *Store) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	query, args = s.bind(query, args)
	return s.db.QueryRowContext(ctx, query, args...)
}

// Tx is one write transaction (see Store.Tx); its statements are written
// like the store's, with `?`.
type Tx struct {
	tx *sql.Tx
	s  *Store
}

func (t *Tx) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	query, args = t.s.bind(query, args)
	return t.tx.ExecContext(ctx, query, args...)
}

func (t *Tx) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	query, args = t.s.bind(query, args)
	return t.tx.QueryContext(ctx, query, args...)
}

func (t *Tx) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	query, args = t.s.bind(query, args)
	return t.tx.QueryRowContext(ctx, query, args...)
}

// insertID runs an INSERT and returns the id of the row it created, with
// RETURNING, which both engines support (SQLite since 3.35).
func (t *Tx) insertID(ctx context.Context, query string, args ...any) (int64, error) {
	var id int64
	err := t.queryRow(ctx, query+" RETURNING id", args...).Scan(&id)
	return id, err
}

// Write transactions on PostgreSQL run SERIALIZABLE, so a read-modify-write
// sees the guarantees SQLite's single writer gives; one that loses a
// conflict to another process is run again from the start, a few times.
const (
	txAttempts = 10
	txBackoff  = 5 * time.Millisecond
)

// Tx runs fn in one write transaction, committing when fn returns nil.
// fn may be run more than once (on PostgreSQL, after a serialization
// failure); it must set whatever it reports afresh each time.
//
// On SQLite the daemon's write transactions queue here, one at a time,
// before they take SQLite's write lock. Left to SQLite's busy handler, which sleeps and
// retries with no order among the waiters, one of twenty concurrent
// writers could wait past the busy timeout and fail with "database is
// locked" (a 500 on a valid POST /api/tunnels under load). Waiting here
// honours ctx; writers in other processes (the admin commands) still meet
// the busy timeout, but only one of ours at a time.
//
// On PostgreSQL too: its serializable transactions run side by side, and
// a conflict between two is a serialization failure, run again. But the
// daemon's writes read much of what they change (every tunnel, to place a
// new one), so an edge's writes at once conflicted with each other until
// one ran out of attempts: a 500 for a valid POST /api/tunnels while 1,000
// machines joined. In the queue, an edge's writes conflict only with
// other edges' (and the admin commands'), which are rare enough to retry.
func (s *Store) Tx(ctx context.Context, fn func(*Tx) error) error {
	select {
	case s.writer <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.writer }()
	for attempt := 1; ; attempt++ {
		err := s.tx(ctx, fn)
		if err == nil || !retryable(err) || attempt == txAttempts {
			return err
		}
		s.txRetries.Add(1)
		d := txBackoff << (attempt - 1)
		d += time.Duration(rand.Int64N(int64(d)))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		}
	}
}

// TxRetries is how many write transactions this handle has run again
// after a serialization failure or a deadlock (PostgreSQL) since it was
// opened: conflicts with other edges' writes.
func (s *Store) TxRetries() uint64 { return s.txRetries.Load() }

func (s *Store) tx(ctx context.Context, fn func(*Tx) error) error {
	var opts *sql.TxOptions
	if s.pg {
		opts = &sql.TxOptions{Isolation: sql.LevelSerializable}
	}
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		s.noteWrite(err)
		return err
	}
	if err := fn(&Tx{tx: tx, s: s}); err != nil {
		err = errors.Join(err, tx.Rollback())
		s.noteWrite(err)
		return err
	}
	if s.pg {
		// Delivered to every listener at commit, and only then.
		if _, err := tx.ExecContext(ctx, "SELECT pg_notify('"+changesChannel+"', '')"); err != nil {
			return errors.Join(err, tx.Rollback())
		}
	}
	err = tx.Commit()
	s.noteWrite(err)
	if err == nil {
		s.committed()
	}
	return err
}

// insertID runs an INSERT outside a transaction and returns the id of the
// row it created.
func (s *Store) insertID(ctx context.Context, query string, args ...any) (int64, error) {
	var id int64
	err := s.writeReturning(ctx, query+" RETURNING id", args, &id)
	s.noteWrite(err)
	if err == nil {
		s.wrote(ctx)
	}
	return id, err
}

// writeReturning runs one write statement with RETURNING outside a
// transaction and scans its first row into dest (sql.ErrNoRows when it
// returned none). It reads the statement to its end: SQLite commits an
// autocommit statement when it finishes, and a commit that fails (a full
// disk) is reported there, at the last step. QueryRow's Scan stops after
// the first row, and SQLite's reset then loses that error: the caller was
// told a row was written that never was.
func (s *Store) writeReturning(ctx context.Context, query string, args []any, dest ...any) error {
	rows, err := s.query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	got := false
	for rows.Next() {
		if !got {
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			got = true
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if !got {
		return sql.ErrNoRows
	}
	return nil
}
