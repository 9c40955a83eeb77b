package store

import (
	"context"
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
}

// InsertAudit appends an entry.
func (s *Store) InsertAudit(ctx context.Context, e AuditEntry) error {
	_, err := s.db.ExecContext(ctx,
		"INSERT INTO audit_log(created_at, kind, client_addr, user_agent, detail) VALUES (?, ?, ?, ?, ?)",
		e.CreatedAt.UnixMilli(), e.Kind, e.ClientAddr, e.UserAgent, e.Detail)
	return err
}

// ListAudit returns at most limit entries, newest first.
func (s *Store) ListAudit(ctx context.Context, limit int) ([]AuditEntry, error) {
	rows, err := s.db.QueryContext(ctx,
		"SELECT id, created_at, kind, client_addr, user_agent, detail FROM audit_log ORDER BY created_at DESC, id DESC LIMIT ?", limit)
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
