package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"
)

// TrafficObservation is one proxy's figures in one poll of frps: its
// per-day byte counters and its open connections.
type TrafficObservation struct {
	Proxy               string
	MachineID, TunnelID int64
	DayIn, DayOut       int64
	Conns               int64
}

// TrafficSeen is what the previous poll of a proxy recorded.
type TrafficSeen struct {
	In, Out int64
	Day     string
	Known   bool
}

// TrafficTotal is a proxy's monotonic byte totals and its last connection count.
type TrafficTotal struct {
	Proxy               string
	MachineID, TunnelID int64
	In, Out             int64
	Conns               int64
}

// ApplyTraffic records one poll in a single transaction: for each
// observation, delta turns the previous and the new per-day counters into
// the bytes carried since the previous poll, which are added to the
// proxy's totals and to its row for minute. Proxies missing from obs keep
// their totals, with no open connection.
func (s *Store) ApplyTraffic(ctx context.Context, minute int64, day string, obs []TrafficObservation,
	delta func(prev TrafficSeen, in, out int64, day string) (int64, int64)) error {
	return s.ApplyTrafficOf(ctx, "", minute, day, obs, delta)
}

// ApplyTrafficOf is ApplyTraffic for the frps of the edge named edge: on
// a cluster, every edge's frps counts the same proxy names, each its own
// traffic, so each edge's totals are kept apart ("<edge>/<proxy>") and
// summed where they are shown. Rows from before edges, with no edge in
// their name, keep their totals.
func (s *Store) ApplyTrafficOf(ctx context.Context, edge string, minute int64, day string, obs []TrafficObservation,
	delta func(prev TrafficSeen, in, out int64, day string) (int64, int64)) error {
	prefix := ""
	if edge != "" {
		prefix = edge + "/"
	}
	return s.Tx(ctx, func(tx *Tx) error {
		// substr, not LIKE: LIKE ignores case on SQLite and not on
		// PostgreSQL, and '_' in a name would match any character.
		if _, err := tx.exec(ctx, "UPDATE traffic_totals SET conns = 0 WHERE substr(proxy, 1, ?) = ? OR proxy NOT LIKE '%/%'", len(prefix), prefix); err != nil {
			return err
		}
		for _, o := range obs {
			o.Proxy = prefix + o.Proxy
			var prev TrafficSeen
			err := tx.queryRow(ctx, "SELECT seen_in, seen_out, seen_day FROM traffic_totals WHERE proxy = ?", o.Proxy).
				Scan(&prev.In, &prev.Out, &prev.Day)
			switch {
			case err == nil:
				prev.Known = true
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
			din, dout := delta(prev, o.DayIn, o.DayOut, day)
			// The existing row's columns are named with their table:
			// PostgreSQL refuses a bare name as ambiguous with excluded's.
			if _, err := tx.exec(ctx, `INSERT INTO traffic_totals(proxy, machine_id, tunnel_id, seen_in, seen_out, seen_day, total_in, total_out, conns)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT(proxy) DO UPDATE SET machine_id = excluded.machine_id, tunnel_id = excluded.tunnel_id,
					seen_in = excluded.seen_in, seen_out = excluded.seen_out, seen_day = excluded.seen_day,
					total_in = traffic_totals.total_in + excluded.total_in, total_out = traffic_totals.total_out + excluded.total_out, conns = excluded.conns`,
				o.Proxy, o.MachineID, o.TunnelID, o.DayIn, o.DayOut, day, din, dout, o.Conns); err != nil {
				return err
			}
			if _, err := tx.exec(ctx, `INSERT INTO traffic_samples(proxy, minute, machine_id, tunnel_id, bytes_in, bytes_out, conns)
				VALUES (?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT(proxy, minute) DO UPDATE SET bytes_in = traffic_samples.bytes_in + excluded.bytes_in,
					bytes_out = traffic_samples.bytes_out + excluded.bytes_out, conns = excluded.conns`,
				o.Proxy, minute, o.MachineID, o.TunnelID, din, dout, o.Conns); err != nil {
				return err
			}
		}
		return nil
	})
}

// TrafficTotals lists every proxy's totals.
func (s *Store) TrafficTotals(ctx context.Context) ([]TrafficTotal, error) {
	rows, err := s.query(ctx, "SELECT proxy, machine_id, tunnel_id, total_in, total_out, conns FROM traffic_totals ORDER BY proxy")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []TrafficTotal
	for rows.Next() {
		var t TrafficTotal
		if err := rows.Scan(&t.Proxy, &t.MachineID, &t.TunnelID, &t.In, &t.Out, &t.Conns); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// TrafficBucket is the bytes a machine or tunnel carried in one bucket of
// minutes, starting at Minute.
type TrafficBucket struct {
	MachineID, TunnelID int64
	Minute              int64
	In, Out             int64
}

// TrafficSince sums the samples from minute from on, per machine and
// tunnel (TunnelID 0 is a machine's ssh and agent proxies), in buckets of
// bucket minutes.
func (s *Store) TrafficSince(ctx context.Context, from, bucket int64) ([]TrafficBucket, error) {
	rows, err := s.query(ctx, `SELECT machine_id, tunnel_id, (minute - ?) / ? * ? + ?, SUM(bytes_in), SUM(bytes_out)
		FROM traffic_samples WHERE minute >= ? GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`, from, bucket, bucket, from, from)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []TrafficBucket
	for rows.Next() {
		var b TrafficBucket
		if err := rows.Scan(&b.MachineID, &b.TunnelID, &b.Minute, &b.In, &b.Out); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// PruneTraffic deletes samples older than minute before, and the totals of
// proxies whose machine or tunnel is gone.
func (s *Store) PruneTraffic(ctx context.Context, before int64) (int64, error) {
	res, err := s.exec(ctx, "DELETE FROM traffic_samples WHERE minute < ?", before)
	if err != nil {
		return 0, err
	}
	if _, err := s.exec(ctx, `DELETE FROM traffic_totals WHERE machine_id NOT IN (SELECT id FROM machines)
		OR (tunnel_id != 0 AND tunnel_id NOT IN (SELECT id FROM tunnels))`); err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// CountAuditByKind returns how many audit entries each kind has.
func (s *Store) CountAuditByKind(ctx context.Context) (map[string]int64, error) {
	rows, err := s.query(ctx, "SELECT kind, COUNT(*) FROM audit_log GROUP BY kind")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}

// DeleteSetting removes a setting; a missing one is not an error.
func (s *Store) DeleteSetting(ctx context.Context, key string) error {
	_, err := s.exec(ctx, "DELETE FROM settings WHERE key = ?", key)
	return err
}

// CountAuditSince counts audit entries of the given kinds since t.
func (s *Store) CountAuditSince(ctx context.Context, t time.Time, kinds []string) (int64, error) {
	if len(kinds) == 0 {
		return 0, nil
	}
	q := "SELECT COUNT(*) FROM audit_log WHERE created_at >= ? AND kind IN (?" + strings.Repeat(", ?", len(kinds)-1) + ")"
	args := []any{t.UnixMilli()}
	for _, k := range kinds {
		args = append(args, k)
	}
	var n int64
	err := s.queryRow(ctx, q, args...).Scan(&n)
	return n, err
}
