package store

import (
	"context"
	"strings"
	"time"
)

// AuditEntry is one row of the audit log.
type AuditEntry struct {
	ID         int64     `json:"id"`
	CreatedAt  time.Time `json:"created_at"`
	Kind       string    `json:"kind"`
	ClientAddr string    `json:"client_addr"`
	UserAgent  string    `json:"user_agent"`
	Detail     string    `json:"detail"`
	// Category is filled by the audit package (not stored).
	Category string `json:"category"`
}

// AuditFilter selects entries by kind: any of Globs (when given) and none
// of ExcludeGlobs (SQLite GLOB patterns).
type AuditFilter struct {
	Globs        []string
	ExcludeGlobs []string
}

// InsertAudit appends an entry.
func (s *Store) InsertAudit(ctx context.Context, e AuditEntry) error {
	_, err := s.db.ExecContext(ctx,
		"INSERT INTO audit_log(created_at, kind, client_addr, user_agent, detail) VALUES (?, ?, ?, ?, ?)",
		e.CreatedAt.UnixMilli(), e.Kind, e.ClientAddr, e.UserAgent, e.Detail)
	return s.announce(err, TopicAudit)
}

// ListAudit returns at most limit entries that pass every filter given,
// newest first.
func (s *Store) ListAudit(ctx context.Context, limit int, filters ...AuditFilter) ([]AuditEntry, error) {
	var f AuditFilter
	for _, g := range filters {
		f.Globs = append(f.Globs, g.Globs...)
		f.ExcludeGlobs = append(f.ExcludeGlobs, g.ExcludeGlobs...)
	}
	var where []string
	var args []any
	if len(f.Globs) > 0 {
		var or []string
		for _, g := range f.Globs {
			or = append(or, "kind GLOB ?")
			args = append(args, g)
		}
		where = append(where, "("+strings.Join(or, " OR ")+")")
	}
	for _, g := range f.ExcludeGlobs {
		where = append(where, "kind NOT GLOB ?")
		args = append(args, g)
	}
	q := "SELECT id, created_at, kind, client_addr, user_agent, detail FROM audit_log"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := s.db.QueryContext(ctx, q+" ORDER BY created_at DESC, id DESC LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []AuditEntry{}
	for rows.Next() {
		var e AuditEntry
		var ms int64
		if err := rows.Scan(&e.ID, &ms, &e.Kind, &e.ClientAddr, &e.UserAgent, &e.Detail); err != nil {
			return nil, err
		}
		e.CreatedAt = time.UnixMilli(ms).UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}
