package app

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"

	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
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

// A PostgreSQL URL opens PostgreSQL: the services start on it and say so;
// one that cannot be reached fails to start with an error that names the
// database but not its password.
func TestOpenStoreDatabase(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.Database = testutil.PostgresURL(t)
	svc, err := Services(context.Background(), &cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := svc.Store.Engine(); got != "postgres" {
		t.Fatalf("engine %q", got)
	}
	svc.Store.Close()

	cfg.Database = "postgres://tunnelsvc:hunter2@127.0.0.1:1/tunnelsvc?sslmode=disable&connect_timeout=2"
	_, err = Services(context.Background(), &cfg, nil)
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("err = %v", err)
	}
}

func TestMain(m *testing.M) {
	auth.LowCostForTests()
	os.Exit(testutil.RunWithPostgres(m))
}
