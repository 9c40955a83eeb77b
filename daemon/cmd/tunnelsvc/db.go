package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/units/sdbus"
)

// stopLine stops the daemon and every socket that would start it again
// (each of the four starts tunnelsvc.service on its first connection: a
// plugin call from frps would bring the daemon back mid-copy).
const stopLine = "systemctl stop tunnelsvc.socket tunnelsvc-plugin.socket tunnelsvc-gate.socket tunnelsvc-local.socket tunnelsvc.service"

// startLine starts it again, the way the package enables it.
const startLine = "systemctl start tunnelsvc.socket tunnelsvc-plugin.socket tunnelsvc-gate.socket tunnelsvc-local.socket"

// sqliteTarget is the --from/--to value that names the SQLite database in
// --data-dir.
const sqliteTarget = "sqlite"

// dbCopy is `tunnelsvc db copy`; its database and system ends are fields
// so that the tests run it against fakes.
type dbCopy struct {
	out io.Writer
	// copy copies every row from one database to the other (an empty URL
	// is SQLite in dataDir) and returns each table's verified counts.
	copy func(ctx context.Context, dataDir, from, to string) ([]app.TableCopy, error)
	// running says, as an error, that a daemon is running and must be
	// stopped first.
	running func(ctx context.Context) error
}

func dbCmd(args []string, out io.Writer) error {
	if len(args) == 0 || args[0] != "copy" {
		return errors.New("usage: tunnelsvc db copy --to URL|sqlite [--from URL|sqlite] [--data-dir DIR]")
	}
	c := dbCopy{out: out, copy: app.CopyDatabase, running: daemonRunning}
	return c.run(context.Background(), args[1:])
}

func (c dbCopy) run(ctx context.Context, args []string) error {
	flags := flag.NewFlagSet("db copy", flag.ContinueOnError)
	flags.SetOutput(c.out)
	dataDir := config.Default().DataDir
	if v, ok := os.LookupEnv("TUNNELSVC_DATA_DIR"); ok {
		dataDir = v
	}
	flags.StringVar(&dataDir, "data-dir", dataDir, "the install's data directory: its SQLite database and sealing key (secret.key) [$TUNNELSVC_DATA_DIR]")
	from := flags.String("from", sqliteTarget, "database to copy from: a postgres:// URL, or sqlite for the SQLite database in --data-dir")
	to := flags.String("to", "", "empty database to copy into: a postgres:// URL, or sqlite for the SQLite database in --data-dir (required)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("db copy: unexpected argument %q", flags.Arg(0))
	}
	if *to == "" {
		return errors.New("db copy: --to is required: a postgres:// URL, or sqlite for the SQLite database in --data-dir")
	}
	fromURL, err := databaseArg("--from", *from)
	if err != nil {
		return err
	}
	toURL, err := databaseArg("--to", *to)
	if err != nil {
		return err
	}
	if fromURL == toURL {
		return fmt.Errorf("db copy: --from and --to are the same database (%s)", describeDB(dataDir, fromURL))
	}
	if dataDir, err = filepath.Abs(dataDir); err != nil {
		return err
	}
	sqlitePath := filepath.Join(dataDir, store.DBFile)
	if fromURL == "" {
		if st, err := os.Stat(sqlitePath); err != nil || st.Size() == 0 {
			return fmt.Errorf("db copy: no SQLite database at %s to copy from (pass --data-dir)", sqlitePath)
		}
	}
	if toURL == "" {
		if st, err := os.Stat(sqlitePath); err == nil && st.Size() > 0 {
			return fmt.Errorf("db copy: %s exists and is not empty; the target must be empty: move it and its -wal and -shm files aside first", sqlitePath)
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("db copy: %w", err)
		}
	}
	if err := c.running(ctx); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "copying %s\n     to %s\n", describeDB(dataDir, fromURL), describeDB(dataDir, toURL))
	tables, err := c.copy(ctx, dataDir, fromURL, toURL)
	if err != nil {
		return fmt.Errorf("db copy: %w (the source keeps its rows)", err)
	}
	// Names left, counts right, hashes after them.
	nameW, rowsW := len("table"), len("rows")
	var rows int64
	for _, t := range tables {
		nameW = max(nameW, len(t.Name))
		rowsW = max(rowsW, len(fmt.Sprint(t.Rows)))
		rows += t.Rows
	}
	fmt.Fprintf(c.out, "%-*s  %*s  %s\n", nameW, "table", rowsW, "rows", "verified hash")
	for _, t := range tables {
		fmt.Fprintf(c.out, "%-*s  %*d  %s\n", nameW, t.Name, rowsW, t.Rows, t.Hash)
	}
	fmt.Fprintf(c.out, "copied %d rows in %d tables; row counts and hashes match on both ends; secrets are still sealed with %s\n",
		rows, len(tables), filepath.Join(dataDir, seal.KeyFile))
	if toURL == "" {
		fmt.Fprintf(c.out, "next: remove the PostgreSQL URL (/etc/tunnelsvc/database-url, TUNNELSVC_DATABASE in /etc/tunnelsvc/tunnelsvc.env), then %s\n", startLine)
	} else {
		fmt.Fprintf(c.out, "next: install -m 0600 /dev/stdin /etc/tunnelsvc/database-url (paste the URL, then Ctrl-D), keep %s beside it, then %s\n",
			filepath.Join(dataDir, seal.KeyFile), startLine)
	}
	return nil
}

// databaseArg turns a --from/--to value into a URL for the store: "" for
// SQLite in --data-dir.
func databaseArg(flagName, v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == sqliteTarget {
		return "", nil
	}
	if err := config.CheckDatabaseURL(v); err != nil {
		return "", fmt.Errorf("db copy: %s: %w, or sqlite", flagName, err)
	}
	return v, nil
}

// describeDB names a database for the operator, the password redacted.
func describeDB(dataDir, url string) string {
	if url == "" {
		return "SQLite " + filepath.Join(dataDir, store.DBFile)
	}
	return "PostgreSQL " + config.RedactDatabaseURL(url)
}

// daemonRunning refuses while a daemon could write to the database: any of
// the package's units active under systemd (a listening socket starts the
// daemon on the next connection), or, without them, anything answering on
// the dashboard address. The port is dialled only once no socket unit is
// active: a connection to an active socket would start the daemon.
func daemonRunning(ctx context.Context) error {
	if sdbus.Booted() {
		// Asked over D-Bus, as the daemon drives its units.
		c, err := sdbus.Dial(ctx)
		if err != nil {
			return fmt.Errorf("db copy: systemd does not answer over D-Bus, so whether tunnelsvc runs is not known: %w", err)
		}
		defer c.Close()
		for _, unit := range []string{"tunnelsvc.service", "tunnelsvc.socket", "tunnelsvc-plugin.socket", "tunnelsvc-gate.socket", "tunnelsvc-local.socket"} {
			p, err := c.GetUnitPropertyContext(ctx, unit, "ActiveState")
			if err != nil {
				return fmt.Errorf("db copy: the state of %s: %w", unit, err)
			}
			state, _ := p.Value.Value().(string)
			if state != "inactive" && state != "failed" {
				return fmt.Errorf("db copy: %s is %s; stop tunnelsvc first: %s", unit, state, stopLine)
			}
		}
	}
	listen := config.Default().Listen
	if v, ok := os.LookupEnv("TUNNELSVC_LISTEN"); ok && v != "" {
		listen = v
	}
	return answering(ctx, listen)
}

// answering is an error when something accepts connections at addr.
func answering(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil
	}
	conn.Close()
	return fmt.Errorf("db copy: a daemon answers on %s; stop tunnelsvc first: %s", addr, stopLine)
}
