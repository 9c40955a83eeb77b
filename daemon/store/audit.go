package store

import (
	"context"
	"strings"
	"time"
)

// AuditEntry is one row of the audit log. Count is how many events the row
// stands for: 1, except for aggregated rows (rate-limited attempts, one row
// per address and minute).
type AuditEntry struct {
	ID         int64     `json:"id"`
	CreatedAt  time.Time `json:"created_at"`
	Kind       string    `json:"kind"`
	ClientAddr string    `json:"client_addr"`
	UserAgent  string    `json:"user_agent"`
	Detail     string    `json:"detail"`
	Count      int64     `json:"count"`
	// Category is filled by the audit package (not stored).
	Category string `json:"category"`
}

// AuditFilter selects entries by kind: any of Globs (when given) and none
// of ExcludeGlobs. A pattern is a kind, or a prefix followed by "*"; both
// match case-sensitively. A "*" or "?" elsewhere matches as in a shell
// (any run of characters, one character).
type AuditFilter struct {
	Globs        []string
	ExcludeGlobs []string
}

// InsertAudit appends an entry.
func (s *Store) InsertAudit(ctx context.Context, e AuditEntry) error {
	_, err := s.exec(ctx,
		"INSERT INTO audit_log(created_at, kind, client_addr, user_agent, detail) VALUES (?, ?, ?, ?, ?)",
		e.CreatedAt.UnixMilli(), e.Kind, e.ClientAddr, e.UserAgent, e.Detail)
	return s.announce(err, TopicAudit)
}

// AddAggregatedAudit counts e in the row of its kind, address and minute,
// creating that row (count 1) for the minute's first event. It reports
// whether it created the row.
func (s *Store) AddAggregatedAudit(ctx context.Context, e AuditEntry) (created bool, err error) {
	bucket := e.CreatedAt.Unix() / 60
	res, err := s.exec(ctx,
		`UPDATE audit_log SET count = count + 1, detail = ? WHERE kind = ? AND client_addr = ? AND bucket = ?`,
		e.Detail, e.Kind, e.ClientAddr, bucket)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return false, err
	}
	// The table's name tells its count from excluded.count: PostgreSQL
	// refuses the bare name as ambiguous.
	res, err = s.exec(ctx,
		`INSERT INTO audit_log(created_at, kind, client_addr, user_agent, detail, bucket) VALUES (?, ?, ?, ?, ?, ?)
		 ON CONFLICT(kind, client_addr, bucket) WHERE bucket IS NOT NULL DO UPDATE SET count = audit_log.count + 1`,
		e.CreatedAt.UnixMilli(), e.Kind, e.ClientAddr, e.UserAgent, e.Detail, bucket)
	if err != nil {
		return false, err
	}
	return true, nil
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
			cond, a := kindMatches(g)
			or = append(or, cond)
			args = append(args, a...)
		}
		where = append(where, "("+strings.Join(or, " OR ")+")")
	}
	for _, g := range f.ExcludeGlobs {
		cond, a := kindMatches(g)
		where = append(where, "NOT "+cond)
		args = append(args, a...)
	}
	q := "SELECT id, created_at, kind, client_addr, user_agent, detail, count FROM audit_log"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := s.query(ctx, q+" ORDER BY created_at DESC, id DESC LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []AuditEntry{}
	for rows.Next() {
		var e AuditEntry
		var ms int64
		if err := rows.Scan(&e.ID, &ms, &e.Kind, &e.ClientAddr, &e.UserAgent, &e.Detail, &e.Count); err != nil {
			return nil, err
		}
		e.CreatedAt = time.UnixMilli(ms).UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}

// kindMatches is the condition that kind matches the pattern g (see
// AuditFilter), in SQL both engines read alike: GLOB is SQLite's alone,
// and LIKE ignores case on SQLite only.
func kindMatches(g string) (string, []any) {
	wild := strings.IndexAny(g, "*?")
	switch {
	case wild < 0:
		return "kind = ?", []any{g}
	case wild == len(g)-1 && g[wild] == '*':
		return "substr(kind, 1, ?) = ?", []any{len(g) - 1, g[:wild]}
	}
	var like strings.Builder
	for _, r := range g {
		switch r {
		case '*':
			like.WriteByte('%')
		case '?':
			like.WriteByte('_')
		case '%', '_', '\\':
			like.WriteByte('\\')
			like.WriteRune(r)
		default:
			like.WriteRune(r)
		}
	}
	return `kind LIKE ? ESCAPE '\'`, []any{like.String()}
}

// AddrSeen is a client address and when it was last seen.
type AddrSeen struct {
	Addr string
	At   time.Time
}

// RecentAuditAddrs returns the addresses of entries of the given kinds
// since since, most recent first, at most limit.
func (s *Store) RecentAuditAddrs(ctx context.Context, since time.Time, limit int, kinds ...string) ([]AddrSeen, error) {
	if len(kinds) == 0 {
		return nil, nil
	}
	args := []any{since.UnixMilli()}
	for _, k := range kinds {
		args = append(args, k)
	}
	args = append(args, limit)
	rows, err := s.query(ctx,
		`SELECT client_addr, MAX(created_at) AS last FROM audit_log
		 WHERE created_at >= ? AND client_addr != '' AND kind IN (?`+strings.Repeat(", ?", len(kinds)-1)+`)
		 GROUP BY client_addr ORDER BY last DESC LIMIT ?`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AddrSeen
	for rows.Next() {
		var a AddrSeen
		var ms int64
		if err := rows.Scan(&a.Addr, &ms); err != nil {
			return nil, err
		}
		a.At = time.UnixMilli(ms)
		out = append(out, a)
	}
	return out, rows.Err()
}
