package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
)

// fakeCopy records what db copy asked for; the copy itself is the store's
// and is tested there.
type fakeCopy struct {
	calls          int
	dataDir, from  string
	to             string
	tables         []app.TableCopy
	err, runningEr error
}

func (f *fakeCopy) cmd(out *bytes.Buffer) dbCopy {
	return dbCopy{out: out,
		copy: func(_ context.Context, dataDir, from, to string) ([]app.TableCopy, error) {
			f.calls++
			f.dataDir, f.from, f.to = dataDir, from, to
			return f.tables, f.err
		},
		running: func(context.Context) error { return f.runningEr },
	}
}

// sqliteDir is a data dir holding a non-empty SQLite file.
func sqliteDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tunnelsvc.db"), []byte("SQLite format 3\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

const pgURL = "postgres://tunnelsvc:hunter2@db.example.com/tunnelsvc?sslmode=verify-full&sslpassword=x"

func TestDBCopyArgumentErrors(t *testing.T) {
	full := sqliteDir(t)
	empty := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no --to", []string{"--data-dir", full}, "--to is required"},
		{"bad --to", []string{"--data-dir", full, "--to", "mysql://u:hunter2@db/x"}, `--to: scheme "mysql" is not supported`},
		{"bad --from", []string{"--data-dir", full, "--from", "db.example.com", "--to", "sqlite"}, "--from: scheme \"\" is not supported"},
		{"same database", []string{"--data-dir", full, "--to", "sqlite"}, "--from and --to are the same database (SQLite " + full + "/tunnelsvc.db)"},
		{"same URL", []string{"--from", pgURL, "--to", pgURL}, "same database (PostgreSQL postgres://tunnelsvc:***@db.example.com/tunnelsvc?sslmode=verify-full)"},
		{"no source", []string{"--data-dir", empty, "--to", pgURL}, "no SQLite database at " + empty + "/tunnelsvc.db"},
		{"target not empty", []string{"--data-dir", full, "--from", pgURL, "--to", "sqlite"}, full + "/tunnelsvc.db exists and is not empty"},
		{"extra argument", []string{"--to", pgURL, "now"}, `unexpected argument "now"`},
		{"unknown flag", []string{"--database", pgURL}, "flag provided but not defined: -database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			f := &fakeCopy{}
			err := f.cmd(&out).run(context.Background(), tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error()+out.String(), "hunter2") {
				t.Fatalf("the password is shown: %v\n%s", err, out.String())
			}
			if f.calls != 0 {
				t.Fatal("copied despite the error")
			}
		})
	}
	if err := dbCmd(nil, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "usage: tunnelsvc db copy") {
		t.Fatalf("db without copy: %v", err)
	}
}

func TestDBCopyRefusesWhileRunning(t *testing.T) {
	var out bytes.Buffer
	f := &fakeCopy{runningEr: errors.New("db copy: tunnelsvc.socket is active; stop tunnelsvc first: " + stopLine)}
	err := f.cmd(&out).run(context.Background(), []string{"--data-dir", sqliteDir(t), "--to", pgURL})
	if err == nil || !strings.Contains(err.Error(), "systemctl stop tunnelsvc.socket tunnelsvc-plugin.socket tunnelsvc-gate.socket tunnelsvc-local.socket tunnelsvc.service") || f.calls != 0 {
		t.Fatalf("err = %v, copies %d", err, f.calls)
	}
}

// Without active units, a daemon answering on the dashboard address is
// found by a connection.
func TestDBCopyFindsListeningDaemon(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := answering(context.Background(), addr); err == nil || !strings.Contains(err.Error(), "a daemon answers on "+addr+"; stop tunnelsvc first") {
		t.Fatalf("listening: %v", err)
	}
	l.Close()
	if err := answering(context.Background(), addr); err != nil {
		t.Fatalf("closed: %v", err)
	}
}

func TestDBCopyOutput(t *testing.T) {
	dir := sqliteDir(t)
	f := &fakeCopy{tables: []app.TableCopy{
		{Name: "settings", Rows: 12, Hash: "sha256:9f2c"},
		{Name: "machines", Rows: 3, Hash: "sha256:01ab"},
		{Name: "audit", Rows: 1042, Hash: "sha256:77e0"},
	}}
	var out bytes.Buffer
	if err := f.cmd(&out).run(context.Background(), []string{"--data-dir", dir, "--to", pgURL}); err != nil {
		t.Fatal(err)
	}
	if f.calls != 1 || f.dataDir != dir || f.from != "" || f.to != pgURL {
		t.Fatalf("copy(%q, %q, %q) x%d", f.dataDir, f.from, f.to, f.calls)
	}
	want := `copying SQLite ` + dir + `/tunnelsvc.db
     to PostgreSQL postgres://tunnelsvc:***@db.example.com/tunnelsvc?sslmode=verify-full
table     rows  verified hash
settings    12  sha256:9f2c
machines     3  sha256:01ab
audit     1042  sha256:77e0
copied 1057 rows in 3 tables; row counts and hashes match on both ends; secrets are still sealed with ` + dir + `/secret.key
next: install -m 0600 /dev/stdin /etc/tunnelsvc/database-url (paste the URL, then Ctrl-D), keep ` + dir + `/secret.key beside it, then systemctl start tunnelsvc.socket tunnelsvc-plugin.socket tunnelsvc-gate.socket tunnelsvc-local.socket
`
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}

	// And back: the SQLite file may be absent (or empty).
	back := t.TempDir()
	os.WriteFile(filepath.Join(back, "tunnelsvc.db"), nil, 0o600)
	out.Reset()
	f = &fakeCopy{tables: f.tables[:1]}
	if err := f.cmd(&out).run(context.Background(), []string{"--data-dir", back, "--from", pgURL, "--to", "sqlite"}); err != nil {
		t.Fatal(err)
	}
	if f.from != pgURL || f.to != "" {
		t.Fatalf("copy(%q, %q)", f.from, f.to)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; last != "next: remove the PostgreSQL URL (/etc/tunnelsvc/database-url, TUNNELSVC_DATABASE in /etc/tunnelsvc/tunnelsvc.env), then systemctl start tunnelsvc.socket tunnelsvc-plugin.socket tunnelsvc-gate.socket tunnelsvc-local.socket" {
		t.Fatalf("last line %q", last)
	}
	if strings.Contains(out.String(), "hunter2") {
		t.Fatalf("the password is shown:\n%s", out.String())
	}

	// A failed copy says the source is unchanged.
	f = &fakeCopy{err: errors.New("target is not empty: table machines has 2 rows")}
	err := f.cmd(&out).run(context.Background(), []string{"--data-dir", dir, "--to", pgURL})
	if err == nil || err.Error() != "db copy: target is not empty: table machines has 2 rows (the source keeps its rows)" {
		t.Fatalf("err = %v", err)
	}
}
