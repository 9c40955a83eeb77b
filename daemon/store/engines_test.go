package store

import (
	"context"
	"os"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunWithPostgres(m)) }

// testDB is one database of a test: open gives a new handle on it each
// call, closed when the test ends (two handles are two processes on one
// database, as the daemon and an admin command are).
type testDB struct {
	t      *testing.T
	engine string
	dir    string // SQLite's data directory
	url    string // PostgreSQL's
}

func (d testDB) open() *Store {
	d.t.Helper()
	s, err := OpenDatabase(context.Background(), d.dir, d.url)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { s.Close() })
	return s
}

// eachEngine runs fn once on a new SQLite database and once on a new
// PostgreSQL database, as subtests named after the engine. The PostgreSQL
// one is a copy of a database migrated once (migrating each test's
// database again cost most of the store tests' PostgreSQL time);
// eachEmptyEngine's databases are empty.
func eachEngine(t *testing.T, fn func(t *testing.T, db testDB)) {
	t.Helper()
	engines(t, false, fn)
}

// eachEmptyEngine is eachEngine on a new, empty database on each engine:
// for the tests of migrating from nothing.
func eachEmptyEngine(t *testing.T, fn func(t *testing.T, db testDB)) {
	t.Helper()
	engines(t, true, fn)
}

func engines(t *testing.T, empty bool, fn func(t *testing.T, db testDB)) {
	t.Helper()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			db := testDB{t: t, engine: engine, dir: t.TempDir()}
			switch {
			case engine == "postgres" && empty:
				db.url = testutil.PostgresURL(t)
			case engine == "postgres":
				db.url = testutil.PostgresURLFrom(t, "store_migrated", migrated)
			}
			fn(t, db)
		})
	}
}

// migrated runs every migration on the database at url.
func migrated(url string) error {
	dir, err := os.MkdirTemp("", "tunnelsvc-store-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	s, err := OpenDatabase(context.Background(), dir, url)
	if err != nil {
		return err
	}
	return s.Close()
}

// eachStore runs fn with one store on each engine.
func eachStore(t *testing.T, fn func(t *testing.T, s *Store)) {
	t.Helper()
	eachEngine(t, func(t *testing.T, db testDB) { fn(t, db.open()) })
}
