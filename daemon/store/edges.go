package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// TopicEdges: an edge joined, changed its address, went up or down, or
// was retired.
const TopicEdges = "edges"

// EdgeDeadAfter is how old an edge's heartbeat may be before the others
// count it as down: its machines' connections through it no longer make
// them online, and the dashboard says it is down.
const EdgeDeadAfter = 30 * time.Second

// Edge is one VPS of the cluster.
type Edge struct {
	ID         int64
	Name       string
	Address    string // the public address machines and clients dial
	TunnelPort int    // the port of its tunnel server (0: not recorded yet)
	Version    string
	// TunnelVersion is the version of the tunnel server (frps) the edge
	// runs, as it last saw it answer ("" until then).
	TunnelVersion string
	CreatedAt     time.Time
	LastSeen      time.Time  // the last heartbeat (zero: never)
	RetiringAt    *time.Time // set once the operator retired it
}

// Up reports whether the edge's heartbeat is recent at now.
func (e Edge) Up(now time.Time) bool {
	return !e.LastSeen.IsZero() && now.Sub(e.LastSeen) < EdgeDeadAfter
}

const edgeCols = "id, name, address, tunnel_port, version, tunnel_version, created_at, last_seen, retiring_at"

func scanEdge(sc interface{ Scan(...any) error }) (Edge, error) {
	var e Edge
	var created int64
	var seen, retiring sql.NullInt64
	if err := sc.Scan(&e.ID, &e.Name, &e.Address, &e.TunnelPort, &e.Version, &e.TunnelVersion, &created, &seen, &retiring); err != nil {
		return e, err
	}
	e.CreatedAt = time.UnixMilli(created).UTC()
	if seen.Valid {
		e.LastSeen = time.UnixMilli(seen.Int64).UTC()
	}
	if retiring.Valid {
		t := time.UnixMilli(retiring.Int64).UTC()
		e.RetiringAt = &t
	}
	return e, nil
}

// EdgeHeartbeat records that the edge named name is up at now with this
// address and version, adding its row the first time. It returns the row.
// An edge being retired stays retiring.
func (s *Store) EdgeHeartbeat(ctx context.Context, name, address, version string, tunnelPort int, now time.Time) (Edge, error) {
	return s.EdgeHeartbeatAs(ctx, 0, name, address, version, tunnelPort, now)
}

// ErrEdgeForgotten: the edge had a row, and it is gone: it was retired
// and forgotten. Its heartbeat does not add it back.
var ErrEdgeForgotten = errors.New("this edge was retired from its cluster and forgotten: it no longer serves the cluster's machines; remove the package from this VPS, or join it again with a new edge token")

// EdgeHeartbeatAs is EdgeHeartbeat from an edge that knows its row's id
// (0 before its first heartbeat): when that row is gone, it fails with
// ErrEdgeForgotten instead of adding the edge again.
func (s *Store) EdgeHeartbeatAs(ctx context.Context, id int64, name, address, version string, tunnelPort int, now time.Time) (Edge, error) {
	var e Edge
	var before Edge
	known := false
	err := s.Tx(ctx, func(tx *Tx) error {
		var err error
		before, err = scanEdge(tx.queryRow(ctx, "SELECT "+edgeCols+" FROM edges WHERE name = ?", name))
		known = err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if !known && id != 0 {
			return ErrEdgeForgotten
		}
		if _, err := tx.exec(ctx, `INSERT INTO edges(name, address, tunnel_port, version, created_at, last_seen) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT(name) DO UPDATE SET address = excluded.address, tunnel_port = excluded.tunnel_port, version = excluded.version,
			last_seen = excluded.last_seen`,
			name, address, tunnelPort, version, now.UnixMilli(), now.UnixMilli()); err != nil {
			return err
		}
		e, err = scanEdge(tx.queryRow(ctx, "SELECT "+edgeCols+" FROM edges WHERE name = ?", name))
		return err
	})
	if err != nil {
		return e, err
	}
	// Announce what the others show: a new edge, a new address or version,
	// an edge back up. A plain heartbeat changes nothing anyone shows.
	if !known || before.Address != e.Address || before.TunnelPort != e.TunnelPort || before.Version != e.Version || !before.Up(now) {
		s.changed(TopicEdges)
	}
	return e, nil
}

// ListEdges returns every edge, oldest first: the first is the cluster's
// first edge (the one whose tunnel client keeps the spec's names on
// machines).
func (s *Store) ListEdges(ctx context.Context) ([]Edge, error) {
	list, err := s.edges.Get(s, func() ([]Edge, error) { return s.listEdges(ctx) })
	if err != nil {
		return nil, err
	}
	out := make([]Edge, len(list))
	for i, e := range list {
		if e.RetiringAt != nil {
			t := *e.RetiringAt
			e.RetiringAt = &t
		}
		out[i] = e
	}
	return out, nil
}

func (s *Store) listEdges(ctx context.Context) ([]Edge, error) {
	rows, err := s.query(ctx, "SELECT "+edgeCols+" FROM edges ORDER BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Edge{}
	for rows.Next() {
		e, err := scanEdge(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// SetEdgeTunnelVersion records the version of the tunnel server the edge
// named name runs (ErrNotFound before its first heartbeat). Announced when
// it changed: the clients machines keep for that edge ask for what both
// sides speak.
func (s *Store) SetEdgeTunnelVersion(ctx context.Context, name, version string) error {
	changed := false
	err := s.Tx(ctx, func(tx *Tx) error {
		var before string
		err := tx.queryRow(ctx, "SELECT tunnel_version FROM edges WHERE name = ?", name).Scan(&before)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil || before == version {
			return err
		}
		changed = true
		_, err = tx.exec(ctx, "UPDATE edges SET tunnel_version = ? WHERE name = ?", version, name)
		return err
	})
	if err == nil && changed {
		s.changed(TopicEdges)
	}
	return err
}

// GetEdge returns one edge (ErrNotFound when there is none).
func (s *Store) GetEdge(ctx context.Context, id int64) (Edge, error) {
	e, err := scanEdge(s.queryRow(ctx, "SELECT "+edgeCols+" FROM edges WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return e, ErrNotFound
	}
	return e, err
}

// RetireEdge marks an edge as being retired (ErrNotFound when there is
// none): machines drop it from their set, then ForgetEdge deletes it.
func (s *Store) RetireEdge(ctx context.Context, id int64, now time.Time) error {
	res, err := s.exec(ctx, "UPDATE edges SET retiring_at = COALESCE(retiring_at, ?) WHERE id = ?", now.UnixMilli(), id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	s.changed(TopicEdges, TopicMachines)
	return nil
}

// ForgetEdge deletes an edge's row and what is known of machines through it.
func (s *Store) ForgetEdge(ctx context.Context, id int64) error {
	res, err := s.exec(ctx, "DELETE FROM edges WHERE id = ?", id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	s.changed(TopicEdges, TopicMachines)
	return nil
}

// InsertEdgeToken stores the hash of a one-time edge join token.
func (s *Store) InsertEdgeToken(ctx context.Context, hash string, created, expires time.Time) (int64, error) {
	id, err := s.insertID(ctx, "INSERT INTO edge_tokens(token_hash, created_at, expires_at) VALUES (?, ?, ?)",
		hash, created.UnixMilli(), expires.UnixMilli())
	if err == nil {
		s.changed(TopicEdges)
	}
	return id, err
}

// ClaimEdgeToken uses the token with this hash for the edge named name:
// ErrTokenInvalid when it is unknown, expired or used by another edge. The
// same edge may claim its token again (a join run twice).
func (s *Store) ClaimEdgeToken(ctx context.Context, hash, name string, now time.Time) error {
	res, err := s.exec(ctx, `UPDATE edge_tokens SET used_at = COALESCE(used_at, ?), edge_name = ?
		WHERE token_hash = ? AND expires_at > ? AND (used_at IS NULL OR edge_name = ?)`,
		now.UnixMilli(), name, hash, now.UnixMilli(), name)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrTokenInvalid
	}
	return nil
}

// MachineEdge is one edge's view of one machine's connection.
type MachineEdge struct {
	MachineID int64
	EdgeID    int64
	Status    string // online or offline
	LastSeen  time.Time
}

// SetMachineEdgeStatus records what the edge saw of the machine (online
// at a Login, offline when its SSH proxy closed) and sets the machine's
// own status from every edge's: online when an edge that is up has it.
func (s *Store) SetMachineEdgeStatus(ctx context.Context, machineID, edgeID int64, status string, now time.Time) error {
	err := s.Tx(ctx, func(tx *Tx) error {
		var one int
		if err := tx.queryRow(ctx, "SELECT 1 FROM machines WHERE id = ?", machineID).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		if _, err := tx.exec(ctx, `INSERT INTO machine_edges(machine_id, edge_id, status, last_seen) VALUES (?, ?, ?, ?)
			ON CONFLICT(machine_id, edge_id) DO UPDATE SET status = excluded.status, last_seen = excluded.last_seen`,
			machineID, edgeID, status, now.UnixMilli()); err != nil {
			return err
		}
		return tx.settleMachineStatus(ctx, machineID, now)
	})
	return s.announce(err, TopicMachines)
}

// SettleMachineEdgeStatus is SetMachineEdgeStatus for what the edge's
// tunnel server reports, made only while nothing newer says otherwise:
// the row must not have been written (a status, a Ping) since quiet, when
// the report was asked for (less a grace). changed says whether it was.
func (s *Store) SettleMachineEdgeStatus(ctx context.Context, machineID, edgeID int64, status string, now, quiet time.Time) (changed bool, err error) {
	err = s.Tx(ctx, func(tx *Tx) error {
		res, err := tx.exec(ctx, "UPDATE machine_edges SET status = ?, last_seen = ? WHERE machine_id = ? AND edge_id = ? AND status <> ? AND last_seen < ?",
			status, now.UnixMilli(), machineID, edgeID, status, quiet.UnixMilli())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 && status == "online" {
			// Connected, and never recorded on this edge.
			if res, err = tx.exec(ctx, `INSERT INTO machine_edges(machine_id, edge_id, status, last_seen)
				SELECT id, ?, ?, ? FROM machines WHERE id = ? ON CONFLICT(machine_id, edge_id) DO NOTHING`,
				edgeID, status, now.UnixMilli(), machineID); err != nil {
				return err
			}
			if n, err = res.RowsAffected(); err != nil {
				return err
			}
		}
		if changed = n > 0; !changed {
			return nil
		}
		return tx.settleMachineStatus(ctx, machineID, now)
	})
	if !changed {
		return false, err
	}
	return true, s.announce(err, TopicMachines)
}

// settleMachineStatus sets machines.status from machine_edges: online when
// a row is online through an edge that is up, else offline (a machine
// never seen by any edge stays as it is, pending).
func (t *Tx) settleMachineStatus(ctx context.Context, machineID int64, now time.Time) error {
	var online, seen int
	if err := t.queryRow(ctx, `SELECT
			COALESCE(SUM(CASE WHEN me.status = 'online' AND e.last_seen > ? AND e.retiring_at IS NULL THEN 1 ELSE 0 END), 0),
			COUNT(*)
		FROM machine_edges me JOIN edges e ON e.id = me.edge_id WHERE me.machine_id = ?`,
		now.Add(-EdgeDeadAfter).UnixMilli(), machineID).Scan(&online, &seen); err != nil {
		return err
	}
	if seen == 0 {
		return nil
	}
	status := "offline"
	if online > 0 {
		status = "online"
	}
	_, err := t.exec(ctx, "UPDATE machines SET status = ?, last_seen = CASE WHEN ? = 'online' THEN ? ELSE last_seen END WHERE id = ? AND status <> ?",
		status, status, now.UnixMilli(), machineID, status)
	return err
}

// SettleMachines sets every machine's status again from its edges' view,
// for when an edge went down (its rows still say online) or was retired.
// It reports how many machines changed.
func (s *Store) SettleMachines(ctx context.Context, now time.Time) (int, error) {
	changed := 0
	err := s.Tx(ctx, func(tx *Tx) error {
		changed = 0
		rows, err := tx.query(ctx, "SELECT DISTINCT machine_id FROM machine_edges")
		if err != nil {
			return err
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, id := range ids {
			var before, after string
			if err := tx.queryRow(ctx, "SELECT status FROM machines WHERE id = ?", id).Scan(&before); err != nil {
				if errors.Is(err, sql.ErrNoRows) {
					continue
				}
				return err
			}
			if err := tx.settleMachineStatus(ctx, id, now); err != nil {
				return err
			}
			if err := tx.queryRow(ctx, "SELECT status FROM machines WHERE id = ?", id).Scan(&after); err != nil {
				return err
			}
			if before != after {
				changed++
			}
		}
		return nil
	})
	if err == nil && changed > 0 {
		s.changed(TopicMachines)
	}
	return changed, err
}

// MachineEdges returns every machine's connections, by machine id, in
// edge order.
func (s *Store) MachineEdges(ctx context.Context) (map[int64][]MachineEdge, error) {
	m, err := s.machineEdges.Get(s, func() (map[int64][]MachineEdge, error) { return s.machineEdgeList(ctx) })
	if err != nil {
		return nil, err
	}
	out := make(map[int64][]MachineEdge, len(m))
	for id, cs := range m {
		out[id] = append([]MachineEdge(nil), cs...)
	}
	return out, nil
}

func (s *Store) machineEdgeList(ctx context.Context) (map[int64][]MachineEdge, error) {
	rows, err := s.query(ctx, "SELECT machine_id, edge_id, status, last_seen FROM machine_edges ORDER BY machine_id, edge_id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64][]MachineEdge{}
	for rows.Next() {
		var me MachineEdge
		var seen sql.NullInt64
		if err := rows.Scan(&me.MachineID, &me.EdgeID, &me.Status, &seen); err != nil {
			return nil, err
		}
		if seen.Valid {
			me.LastSeen = time.UnixMilli(seen.Int64).UTC()
		}
		out[me.MachineID] = append(out[me.MachineID], me)
	}
	return out, rows.Err()
}

// LeaseFence takes or renews the lease called name for holder until
// now+ttl, and returns its fence while holder has it, 0 when it does not:
// a lease another holder has is taken only once it has expired. Jobs that
// must run once in a cluster run while their edge holds the lease. The
// fence is a number that grows by one each time the lease changes hands. A job's writes carry it, and a write with an older
// fence than the last one is refused (ErrFenced): an edge that lost the
// lease while it was stopped cannot undo the work of the one that took it.
func (s *Store) LeaseFence(ctx context.Context, name, holder string, ttl time.Duration, now time.Time) (int64, error) {
	var fence int64
	err := s.writeReturning(ctx, `INSERT INTO leases(name, holder, expires_at, fence) VALUES (?, ?, ?, 1)
		ON CONFLICT(name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,
			fence = CASE WHEN leases.holder = excluded.holder THEN leases.fence ELSE leases.fence + 1 END
		WHERE leases.holder = excluded.holder OR leases.expires_at <= ?
		RETURNING fence`,
		[]any{name, holder, now.Add(ttl).UnixMilli(), now.UnixMilli()}, &fence)
	s.noteWrite(err)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return fence, err
}

// RegisterEdge adds an edge that is joining (no heartbeat yet); an edge
// of that name that is already there is left as it is.
func (s *Store) RegisterEdge(ctx context.Context, name string, now time.Time) error {
	_, err := s.exec(ctx, "INSERT INTO edges(name, created_at) VALUES (?, ?) ON CONFLICT(name) DO NOTHING", name, now.UnixMilli())
	if err == nil {
		s.changed(TopicEdges)
	}
	return err
}
