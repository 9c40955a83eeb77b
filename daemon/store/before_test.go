package store

import (
	"database/sql"
	"path/filepath"
	"testing"
)

// sqliteBefore is a SQLite database in dir as a daemon left it before
// migration version: every earlier migration applied and recorded.
func sqliteBefore(t *testing.T, dir string, version int) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", dsn(filepath.Join(dir, DBFile)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(schemaMigrations[false]); err != nil {
		t.Fatal(err)
	}
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.version >= version {
			break
		}
		if _, err := db.Exec(m.sql); err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
		if _, err := db.Exec("INSERT INTO schema_migrations(version, name) VALUES (?, ?)", m.version, m.name); err != nil {
			t.Fatal(err)
		}
	}
	return db
}
