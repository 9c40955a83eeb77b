package testutil

import (
	"sync"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/pgtest"
)

// A throwaway PostgreSQL for tests (package pgtest): one server per test
// binary, started at the first PostgresURL call. Each call gets a database
// of its own. A package that uses it calls RunWithPostgres from its
// TestMain, which stops the server and removes its files at the end.

var pg struct {
	once   sync.Once
	server *pgtest.Server
	err    error

	mu        sync.Mutex
	templates map[string]*pgTemplate
}

// pgTemplate is a database prepared once (migrated), which others copy.
type pgTemplate struct {
	once sync.Once
	err  error
}

// RunWithPostgres runs the tests, then stops the test PostgreSQL if one
// was started; pass its result to os.Exit.
func RunWithPostgres(m *testing.M) int {
	code := m.Run()
	if pg.server != nil {
		pg.server.Stop()
	}
	return code
}

// PostgresURL returns the URL of a new, empty database on the test
// PostgreSQL, starting the server on first use. Without Debian's
// postgresql package the test fails, saying to install it.
func PostgresURL(t testing.TB) string {
	t.Helper()
	pg.once.Do(func() { pg.server, pg.err = pgtest.Start("") })
	if pg.err != nil {
		t.Fatalf("test PostgreSQL: %v", pg.err)
	}
	url, err := pg.server.NewDatabase()
	if err != nil {
		t.Fatalf("test PostgreSQL: %v", err)
	}
	return url
}

// PostgresURLFrom returns the URL of a new database that is a copy of the
// database template, which prepare(url) fills the first time a test asks
// for it (e.g. runs every migration): copying is much faster than
// migrating each test's database again.
func PostgresURLFrom(t testing.TB, template string, prepare func(url string) error) string {
	t.Helper()
	pg.once.Do(func() { pg.server, pg.err = pgtest.Start("") })
	if pg.err != nil {
		t.Fatalf("test PostgreSQL: %v", pg.err)
	}
	pg.mu.Lock()
	if pg.templates == nil {
		pg.templates = map[string]*pgTemplate{}
	}
	tpl := pg.templates[template]
	if tpl == nil {
		tpl = &pgTemplate{}
		pg.templates[template] = tpl
	}
	pg.mu.Unlock()
	tpl.once.Do(func() {
		url, err := pg.server.CreateDatabase(template, "")
		if err == nil {
			err = prepare(url)
		}
		tpl.err = err
	})
	if tpl.err != nil {
		t.Fatalf("test PostgreSQL: template %s: %v", template, tpl.err)
	}
	url, err := pg.server.NewDatabaseFrom(template)
	if err != nil {
		t.Fatalf("test PostgreSQL: %v", err)
	}
	return url
}

// OwnPostgres starts a PostgreSQL server for this test alone (one it may
// stop: Halt, Resume), stopped when the test ends, and returns it with
// the URL of a new database on it.
func OwnPostgres(t testing.TB) (*pgtest.Server, string) {
	t.Helper()
	srv, err := pgtest.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	url, err := srv.NewDatabase()
	if err != nil {
		t.Fatal(err)
	}
	return srv, url
}
