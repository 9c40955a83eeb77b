package store

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"context"
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

func TestDiskFullKnowsTheErrorsOfAFullDisk(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{sqlite3.Error{Code: sqlite3.ErrFull}, true},
		{fmt.Errorf("create session: %w", sqlite3.Error{Code: sqlite3.ErrFull}), true},
		{errors.Join(errors.New("insert"), sqlite3.Error{Code: sqlite3.ErrFull}), true},
		{sqlite3.Error{Code: sqlite3.ErrIoErr, SystemErrno: syscall.ENOSPC}, true},
		{&fs.PathError{Op: "write", Path: "/var/lib/tunnelsvc/key", Err: syscall.ENOSPC}, true},
		{fmt.Errorf("deploy: %w", &fs.PathError{Op: "write", Path: "/etc/x", Err: syscall.EDQUOT}), true},
		{sqlite3.Error{Code: sqlite3.ErrBusy}, false},
		{sqlite3.Error{Code: sqlite3.ErrConstraint}, false},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EACCES}, false},
		{ErrNotFound, false},
		{nil, false},
	} {
		if got := DiskFull(c.err); got != c.want {
			t.Errorf("DiskFull(%#v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// The data directory on a small tmpfs, filled: statfs says 0 bytes free,
// writes fail with SQLITE_FULL, and both make Space say full; once the
// filler is gone the failure is forgotten without a write of ours.
func TestSpaceOfAFullDataDisk(t *testing.T) {
	dir := testutil.Tmpfs(t, "8m")
	ctx := context.Background()
	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sp, err := s.Space()
	if err != nil || sp.Full || sp.Free == 0 || sp.Size != 8<<20 || sp.Dir != dir {
		t.Fatalf("fresh: %+v, %v", sp, err)
	}
	if err := s.Writable(); err != nil {
		t.Fatalf("fresh: Writable = %v", err)
	}

	filler := testutil.FillDisk(t, dir)
	sp, _ = s.Space()
	if !sp.Full || sp.Free != 0 {
		t.Fatalf("filled: %+v", sp)
	}
	var full *FullError
	if err := s.Writable(); !errors.As(err, &full) || full.Dir != dir || err.Error() != "data disk full: "+dir {
		t.Fatalf("filled: Writable = %v", err)
	}
	// A value bigger than anything the database has room for.
	big := strings.Repeat("x", 256<<10)
	err = s.SetSetting(ctx, "big", big)
	if !DiskFull(err) {
		t.Fatalf("write on a full disk: %v, want SQLITE_FULL", err)
	}
	// An insert that returns its id says so too, and wrote nothing: the
	// commit fails at the statement's end, which must not be lost.
	label := strings.Repeat("y", 256<<10)
	if _, err := s.InsertBootstrapToken(ctx, "h-full", label, time.Now(), time.Now().Add(time.Hour)); !DiskFull(err) {
		t.Fatalf("insert with RETURNING on a full disk: %v, want SQLITE_FULL", err)
	}
	var n int
	if err := s.db.QueryRow("SELECT COUNT(*) FROM bootstrap_tokens WHERE token_hash = 'h-full'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the refused insert left %d rows (%v)", n, err)
	}

	// Room again: the failed write is still remembered until the probe
	// has written; no write of the daemon's own is needed.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if sp, _ := s.Space(); !sp.Full || sp.Free == 0 {
		t.Fatalf("freed, not probed yet: %+v", sp)
	}
	testutil.Eventually(t, 10*time.Second, "Space after the filler is gone", func() error {
		if sp, _ := s.Space(); sp.Full {
			return fmt.Errorf("still full: %+v", sp)
		}
		return nil
	})
	if err := s.SetSetting(ctx, "big", big); err != nil {
		t.Fatalf("write after freeing: %v", err)
	}
	if _, err := os.Stat(dir + "/" + probeFile); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the probe file stayed: %v", err)
	}
}

// A failed write is forgotten at the next write that changed something,
// and not at one that matched nothing.
func TestSpaceForgetsAFailureAtTheNextWrite(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.noteWrite(sqlite3.Error{Code: sqlite3.ErrFull})
	// Kept from probing: this test is about the writes.
	s.probedAt.Store(time.Now().Add(time.Hour).UnixNano())
	if sp, _ := s.Space(); !sp.Full {
		t.Fatalf("after a failed write: %+v", sp)
	}
	if err := s.DeleteSession(ctx, "no such session"); err != nil {
		t.Fatal(err)
	}
	if sp, _ := s.Space(); !sp.Full {
		t.Fatalf("a write that matched nothing cleared it: %+v", sp)
	}
	if err := s.SetSetting(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if sp, _ := s.Space(); sp.Full {
		t.Fatalf("after a write that worked: %+v", sp)
	}
	s.noteWrite(sqlite3.Error{Code: sqlite3.ErrFull})
	if err := s.Tx(ctx, func(tx *Tx) error {
		_, err := tx.exec(ctx, "INSERT INTO settings(key, value) VALUES ('t', 'v')")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if sp, _ := s.Space(); sp.Full {
		t.Fatalf("after a transaction that committed: %+v", sp)
	}
}

// TestDiskFullOnPostgreSQL: PostgreSQL's disk_full (SQLSTATE 53100), as
// pgx hands it over however wrapped, is a full disk as SQLite's is.
func TestDiskFullOnPostgreSQL(t *testing.T) {
	full := &pgconn.PgError{Severity: "ERROR", Code: "53100", Message: `could not extend file "base/16384/16385": No space left on device`}
	if !DiskFull(fmt.Errorf("insert audit: %w", full)) {
		t.Fatal("53100 is not a full disk")
	}
	if DiskFull(&pgconn.PgError{Code: "40001", Message: "could not serialize access"}) {
		t.Fatal("a serialization failure is a full disk")
	}
}
