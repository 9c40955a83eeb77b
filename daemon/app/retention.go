package app

import (
	"context"
	"time"
)

// Retention: the audit log, the activity feed and the stale-token attempts
// are pruned at start and then every pruneEvery to cfg.RetentionDays, and
// to at most MaxRowsPerTable rows each, newest kept.
const (
	MaxRowsPerTable = 100_000
	pruneEvery      = 10 * time.Minute
)

// prune runs one pass and logs what it removed.
func (a *App) prune(ctx context.Context) {
	cutoff := time.Now().Add(-time.Duration(a.Config.RetentionDays) * 24 * time.Hour)
	n, err := a.Store.Prune(ctx, cutoff, MaxRowsPerTable)
	if err != nil {
		a.Log.Warn("retention: pruning failed", "err", err)
		return
	}
	for table, rows := range n {
		if rows > 0 {
			a.Log.Info("retention: pruned old rows", "table", table, "rows", rows, "retention_days", a.Config.RetentionDays)
		}
	}
}

// pruneLoop prunes until ctx ends.
func (a *App) pruneLoop(ctx context.Context) {
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		a.prune(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
