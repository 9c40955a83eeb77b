package store

import (
	"context"
	"database/sql"
	"errors"
)

// DomainTakenError names a domain another tunnel already serves.
type DomainTakenError struct {
	Domain   string
	TunnelID int64
}

func (e *DomainTakenError) Error() string { return "domain " + e.Domain + " is already in use" }
func (e *DomainTakenError) Unwrap() error { return ErrConflict }

// setDomains makes tunnel tunnelID's own domains exactly ds (lower-case,
// checked by the caller): a *DomainTakenError when another tunnel has one.
func setDomains(ctx context.Context, tx *Tx, tunnelID int64, ds []string) error {
	for _, d := range ds {
		var owner int64
		err := tx.queryRow(ctx, "SELECT tunnel_id FROM tunnel_domains WHERE domain = ?", d).Scan(&owner)
		if err == nil && owner != tunnelID {
			return &DomainTakenError{Domain: d, TunnelID: owner}
		}
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
	}
	if _, err := tx.exec(ctx, "DELETE FROM tunnel_domains WHERE tunnel_id = ?", tunnelID); err != nil {
		return err
	}
	for _, d := range ds {
		if _, err := tx.exec(ctx, "INSERT INTO tunnel_domains(domain, tunnel_id) VALUES (?, ?)", d, tunnelID); err != nil {
			if _, ok := uniqueViolation(err); ok {
				return &DomainTakenError{Domain: d}
			}
			return err
		}
	}
	return nil
}

// SetTunnelDomains makes tunnel tunnelID's own domains exactly ds.
func (s *Store) SetTunnelDomains(ctx context.Context, tunnelID int64, ds []string) error {
	err := s.Tx(ctx, func(tx *Tx) error { return setDomains(ctx, tx, tunnelID, ds) })
	return s.announce(err, TopicTunnels)
}

// TunnelDomains returns every tunnel's own domains, by tunnel, sorted.
func (s *Store) TunnelDomains(ctx context.Context) (map[int64][]string, error) {
	return s.tunnelDomains(ctx, "")
}

// TunnelDomainsOf returns tunnel id's own domains, sorted.
func (s *Store) TunnelDomainsOf(ctx context.Context, id int64) ([]string, error) {
	ds, err := s.tunnelDomains(ctx, " WHERE tunnel_id = ?", id)
	return ds[id], err
}

// tunnelDomains reads the domains where says (a WHERE clause or "").
func (s *Store) tunnelDomains(ctx context.Context, where string, args ...any) (map[int64][]string, error) {
	rows, err := s.query(ctx, "SELECT tunnel_id, domain FROM tunnel_domains"+where+" ORDER BY tunnel_id, domain", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64][]string{}
	for rows.Next() {
		var id int64
		var d string
		if err := rows.Scan(&id, &d); err != nil {
			return nil, err
		}
		out[id] = append(out[id], d)
	}
	return out, rows.Err()
}

// DomainOwner returns the tunnel that serves domain, or ErrNotFound.
func (s *Store) DomainOwner(ctx context.Context, domain string) (int64, error) {
	var id int64
	err := s.queryRow(ctx, "SELECT tunnel_id FROM tunnel_domains WHERE domain = ?", domain).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrNotFound
	}
	return id, err
}
