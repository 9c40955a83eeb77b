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
// PostgreSQL database, as subtests named after the engine.
func eachEngine(t *testing.T, fn func(t *testing.T, db testDB)) {
	t.Helper()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			db := testDB{t: t, engine: engine, dir: t.TempDir()}
			if engine == "postgres" {
				db.url = testutil.PostgresURL(t)
			}
			fn(t, db)
		})
	}
}

// eachStore runs fn with one store on each engine.
func eachStore(t *testing.T, fn func(t *testing.T, s *Store)) {
	t.Helper()
	eachEngine(t, func(t *testing.T, db testDB) { fn(t, db.open()) })
}
