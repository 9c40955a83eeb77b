package store

import (
	"context"
	"fmt"
	"time"
)

// The tables that grow with traffic and are pruned to the retention
// setting: the audit log, the activity feed and the stale-token attempts.
var prunedTables = []string{"audit_log", "activity_events", "stale_token_attempts"}

// Pruned says how many rows Prune removed from each table.
type Pruned map[string]int64

// Prune deletes rows created before cutoff and then, newest kept, all but
// maxRows of each pruned table.
func (s *Store) Prune(ctx context.Context, cutoff time.Time, maxRows int) (Pruned, error) {
	out := Pruned{}
	for _, table := range prunedTables {
		// All three keep created_at in unix milliseconds.
		res, err := s.exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE created_at < ?", table), cutoff.UnixMilli())
		if err != nil {
			return out, fmt.Errorf("prune %s: %w", table, err)
		}
		n, _ := res.RowsAffected()
		res, err = s.exec(ctx, fmt.Sprintf(
			"DELETE FROM %[1]s WHERE id <= (SELECT id FROM %[1]s ORDER BY id DESC LIMIT 1 OFFSET ?)", table), maxRows)
		if err != nil {
			return out, fmt.Errorf("prune %s: %w", table, err)
		}
		m, _ := res.RowsAffected()
		out[table] = n + m
	}
	return out, nil
}
