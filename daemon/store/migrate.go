package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Migrations are numbered files NNNN_name.sql. Rules: append only; a file
// that has shipped is never edited; each runs in its own transaction with
// its version recorded in the same transaction.
//
// migrations/ is SQLite's, migrations_pg/ PostgreSQL's: the same numbers
// and names, producing the same schema (TestSchemasMatch compares them).
// A new migration adds one file to each.
//
//go:embed migrations/*.sql migrations_pg/*.sql
var migrationFS embed.FS

// migrationDir is the engine's migration directory.
func (s *Store) migrationDir() string {
	if s.pg {
		return "migrations_pg"
	}
	return "migrations"
}

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) { return loadMigrationsFrom("migrations") }

func loadMigrationsFrom(dir string) ([]migration, error) {
	entries, err := migrationFS.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ms []migration
	seen := map[int]string{}
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		if !ok || !strings.HasSuffix(e.Name(), ".sql") {
			return nil, fmt.Errorf("migration %q: name must be NNNN_name.sql", e.Name())
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %q: %w", e.Name(), err)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %q and %q share version %d", prev, e.Name(), v)
		}
		seen[v] = e.Name()
		body, err := migrationFS.ReadFile(dir + "/" + e.Name())
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	return ms, nil
}

// schemaMigrations is the table of applied migrations, in each dialect.
var schemaMigrations = map[bool]string{
	false: `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY,
		name TEXT NOT NULL,
		applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')))`,
	true: `CREATE TABLE IF NOT EXISTS schema_migrations (
		version BIGINT PRIMARY KEY,
		name TEXT NOT NULL,
		applied_at TEXT NOT NULL DEFAULT (to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))`,
}

// migrateLock is the PostgreSQL advisory lock two daemons starting at once
// on one database take in turn to migrate it.
const migrateLock = 0x7475_6e6e_656c // "tunnel"

func (s *Store) migrate(ctx context.Context) error {
	err := s.Tx(ctx, func(tx *Tx) error {
		if err := tx.lockMigrations(ctx); err != nil {
			return err
		}
		_, err := tx.exec(ctx, schemaMigrations[s.pg])
		return err
	})
	if err != nil {
		return err
	}
	ms, err := loadMigrationsFrom(s.migrationDir())
	if err != nil {
		return err
	}
	for _, m := range ms {
		if !s.pg && strings.HasPrefix(m.sql, foreignKeysOff) {
			if err := s.migrateForeignKeysOff(ctx, m); err != nil {
				return err
			}
			continue
		}
		err := s.Tx(ctx, func(tx *Tx) error {
			if err := tx.lockMigrations(ctx); err != nil {
				return err
			}
			var n int
			if err := tx.queryRow(ctx, "SELECT COUNT(*) FROM schema_migrations WHERE version = ?", m.version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			// Run as written, without binding: several statements, no
			// arguments.
			if _, err := tx.tx.ExecContext(ctx, m.sql); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			_, err := tx.exec(ctx, "INSERT INTO schema_migrations(version, name) VALUES (?, ?)", m.version, m.name)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// foreignKeysOff opens a SQLite migration that rebuilds a table other
// tables reference. SQLite changes a constraint only by rebuilding the
// table, and with foreign keys on, dropping the old table would delete
// every row that references it (ON DELETE CASCADE).
const foreignKeysOff = "-- sqlite: foreign keys off\n"

// migrateForeignKeysOff runs m as SQLite's documented procedure for
// changing a table's schema: foreign keys off on one connection, the
// migration in one transaction, PRAGMA foreign_key_check before the
// commit (a broken reference rolls everything back), foreign keys on
// again before the connection returns to the pool.
func (s *Store) migrateForeignKeysOff(ctx context.Context, m migration) (err error) {
	s.writer <- struct{}{}
	defer func() { <-s.writer }()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// PRAGMA foreign_keys does nothing inside a transaction: it is set
	// before BEGIN and restored after the end.
	if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
		return fmt.Errorf("%s: %w", m.name, err)
	}
	defer func() {
		if _, e := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA foreign_keys = ON"); e != nil && err == nil {
			err = fmt.Errorf("%s: foreign keys back on: %w", m.name, e)
		}
	}()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations WHERE version = ?", m.version).Scan(&n); err != nil || n > 0 {
		return err
	}
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return fmt.Errorf("%s: %w", m.name, err)
	}
	rows, err := tx.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err != nil {
		return fmt.Errorf("%s: %w", m.name, err)
	}
	var broken []string
	for rows.Next() {
		var table, parent string
		var rowid sql.NullInt64
		var fk int
		if err := rows.Scan(&table, &rowid, &parent, &fk); err != nil {
			rows.Close()
			return err
		}
		broken = append(broken, fmt.Sprintf("%s row %d → %s", table, rowid.Int64, parent))
	}
	rows.Close()
	if len(broken) > 0 {
		return fmt.Errorf("%s: would leave %d broken references (%s); nothing was changed", m.name, len(broken), strings.Join(broken[:min(3, len(broken))], ", "))
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations(version, name) VALUES (?, ?)", m.version, m.name); err != nil {
		return err
	}
	return tx.Commit()
}

// lockMigrations makes concurrent migrations of one PostgreSQL database
// take turns until the transaction ends (SQLite's write lock does this).
func (tx *Tx) lockMigrations(ctx context.Context) error {
	if !tx.s.pg {
		return nil
	}
	_, err := tx.exec(ctx, "SELECT pg_advisory_xact_lock(?)", int64(migrateLock))
	return err
}

// SchemaVersion returns the highest applied migration.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v sql.NullInt64
	err := s.queryRow(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&v)
	return int(v.Int64), err
}
