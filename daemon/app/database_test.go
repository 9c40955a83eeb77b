package app

import (
	"context"
	"errors"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
)

func TestDatabaseStatus(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = "/var/lib/tunnelsvc"
	if got, want := DatabaseStatus(&cfg), (localsetup.DatabaseStatus{Engine: "sqlite", Path: "/var/lib/tunnelsvc/tunnelsvc.db"}); got != want {
		t.Fatalf("sqlite: %+v", got)
	}
	cfg.Database = "postgres://tunnelsvc:hunter2@db.example.com/tunnelsvc?sslmode=verify-full&sslpassword=x"
	want := localsetup.DatabaseStatus{Engine: "postgres", URL: "postgres://tunnelsvc:***@db.example.com/tunnelsvc?sslmode=verify-full"}
	if got := DatabaseStatus(&cfg); got != want {
		t.Fatalf("postgres: %+v", got)
	}
}

// Until the store speaks PostgreSQL, a PostgreSQL URL is refused with a
// clear error, and the error does not show the password.
func TestOpenStoreDatabase(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.Database = "postgres://tunnelsvc:hunter2@db.example.com/tunnelsvc"
	_, err := Services(context.Background(), &cfg, nil)
	if !errors.Is(err, ErrNoPostgres) {
		t.Fatalf("err = %v", err)
	}
	if want := "open database postgres://tunnelsvc:***@db.example.com/tunnelsvc: PostgreSQL support is not built into this daemon yet"; err.Error() != want {
		t.Fatalf("err = %q", err)
	}
}
