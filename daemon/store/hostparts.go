package store

import (
	"context"
	"database/sql"
	"time"
)

// TopicHostParts is announced when an edge records a new state of a part
// of its host (applied, pending, or well again).
const TopicHostParts = "host_parts"

// HostPart is what an edge last found of one part of its own host (see
// hostsync): the configuration desired and the one applied, how many it
// applied, and since when and why it is pending.
type HostPart struct {
	Edge, Part, Label        string
	InUse                    bool
	DesiredHash, AppliedHash string
	Generation               int64
	PendingSince             *time.Time
	Error                    string
	CheckedAt                time.Time
}

// SaveHostPart records edge's state of a part.
func (s *Store) SaveHostPart(ctx context.Context, p HostPart) error {
	var since sql.NullInt64
	if p.PendingSince != nil {
		since = sql.NullInt64{Int64: p.PendingSince.UnixMilli(), Valid: true}
	}
	inUse := 0
	if p.InUse {
		inUse = 1
	}
	_, err := s.exec(ctx, `INSERT INTO host_parts(edge, part, label, in_use, desired_hash, applied_hash, generation, pending_since, error, checked_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(edge, part) DO UPDATE SET label = excluded.label, in_use = excluded.in_use, desired_hash = excluded.desired_hash,
			applied_hash = excluded.applied_hash, generation = excluded.generation, pending_since = excluded.pending_since,
			error = excluded.error, checked_at = excluded.checked_at`,
		p.Edge, p.Part, p.Label, inUse, p.DesiredHash, p.AppliedHash, p.Generation, since, p.Error, p.CheckedAt.UnixMilli())
	return s.announce(err, TopicHostParts)
}

// HostParts lists every edge's parts, by edge then part.
func (s *Store) HostParts(ctx context.Context) ([]HostPart, error) {
	rows, err := s.query(ctx, `SELECT edge, part, label, in_use, desired_hash, applied_hash, generation, pending_since, error, checked_at
		FROM host_parts ORDER BY edge, part`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []HostPart
	for rows.Next() {
		var p HostPart
		var inUse int
		var since sql.NullInt64
		var checked int64
		if err := rows.Scan(&p.Edge, &p.Part, &p.Label, &inUse, &p.DesiredHash, &p.AppliedHash, &p.Generation, &since, &p.Error, &checked); err != nil {
			return nil, err
		}
		p.InUse = inUse != 0
		if since.Valid {
			t := time.UnixMilli(since.Int64).UTC()
			p.PendingSince = &t
		}
		p.CheckedAt = time.UnixMilli(checked).UTC()
		out = append(out, p)
	}
	return out, rows.Err()
}

// Drifted says whether the part is not (yet) as desired.
func (p HostPart) Drifted() bool { return p.InUse && (p.Error != "" || p.DesiredHash != p.AppliedHash) }
