package app

import (
	"context"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Retention: the audit log, the activity feed and the stale-token attempts
// are pruned at start and then every pruneEvery to cfg.RetentionDays, and
// to at most MaxRowsPerTable rows each, newest kept; speed tests to
// store.SpeedTestRetention.
const (
	MaxRowsPerTable = 100_000
	pruneEvery      = 10 * time.Minute
)

// prune runs one pass and logs what it removed.
func (a *App) prune(ctx context.Context) {
	if !a.lease("retention", 2*pruneEvery)(ctx) {
		return // another edge of the cluster prunes
	}
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
	// Failures older than the login limits' window, gate tokens past
	// their expiry: nobody reads them again.
	if err := a.Store.PruneAuthFailures(ctx, time.Now().Add(-2*auth.FailureWindow)); err != nil {
		a.Log.Warn("retention: pruning failed", "table", "auth_failures", "err", err)
	}
	if err := a.Store.PruneGateTokens(ctx, time.Now()); err != nil {
		a.Log.Warn("retention: pruning failed", "table", "gate_tokens", "err", err)
	}
	// Speed tests are kept 90 days, whatever the retention setting: they
	// are few (each one asked for) and their chart spans that long.
	if n, err := a.Store.PruneSpeedTests(ctx, time.Now().Add(-store.SpeedTestRetention)); err != nil {
		a.Log.Warn("retention: pruning failed", "table", "speedtests", "err", err)
	} else if n > 0 {
		a.Log.Info("retention: pruned old rows", "table", "speedtests", "rows", n)
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
