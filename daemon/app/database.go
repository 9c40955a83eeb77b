package app

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// openStore opens the daemon's database: SQLite in dataDir when
// databaseURL is empty, else the PostgreSQL database it names.
func openStore(ctx context.Context, dataDir, databaseURL string) (*store.Store, error) {
	return store.OpenDatabase(ctx, dataDir, databaseURL)
}

// describeStore names the database in open errors, the password redacted.
func describeStore(cfg *config.Config) string {
	if cfg.Database == "" {
		return "store in " + cfg.DataDir
	}
	return "database " + config.RedactDatabaseURL(cfg.Database)
}

// DatabaseStatus is the database part of GET /api/local/status, from the
// configuration the daemon runs with (the store itself stays the one
// package that knows which engine it talks to).
func DatabaseStatus(cfg *config.Config) localsetup.DatabaseStatus {
	if cfg.Database == "" {
		return localsetup.DatabaseStatus{Engine: "sqlite", Path: filepath.Join(cfg.DataDir, store.DBFile)}
	}
	return localsetup.DatabaseStatus{Engine: "postgres", URL: config.RedactDatabaseURL(cfg.Database)}
}

// TableCopy is what copying one table did: the rows copied and the content
// hash both ends agreed on.
type TableCopy struct {
	Name string
	Rows int64
	Hash string
}

// CopyDatabase copies every row of the database at fromURL into the empty
// one at toURL (an empty URL is SQLite in dataDir), verifying row counts and
// content hashes per table. Secrets stay sealed: the sealing key is a file
// beside the SQLite database, never a row.
func CopyDatabase(ctx context.Context, dataDir, fromURL, toURL string) ([]TableCopy, error) {
	if fromURL == toURL {
		return nil, errors.New("the source and the target are the same database")
	}
	from, err := openStore(ctx, dataDir, fromURL)
	if err != nil {
		return nil, fmt.Errorf("open the source: %w", err)
	}
	defer from.Close()
	to, err := openStore(ctx, dataDir, toURL)
	if err != nil {
		return nil, fmt.Errorf("open the target: %w", err)
	}
	defer to.Close()
	return copyStores(ctx, from, to)
}

// copyStores copies with store.Copy, which refuses a target that is not
// empty and verifies every table on both ends.
func copyStores(ctx context.Context, from, to *store.Store) ([]TableCopy, error) {
	rep, err := store.Copy(ctx, from, to)
	out := make([]TableCopy, len(rep.Tables))
	for i, t := range rep.Tables {
		out[i] = TableCopy{Name: t.Table, Rows: t.Rows, Hash: t.Hash}
	}
	return out, err
}
