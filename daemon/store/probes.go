package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// TunnelProbe is the last reachability probe of an http tunnel.
type TunnelProbe struct {
	TunnelID      int64
	State         string // up, down
	HTTPStatus    int
	Error         string
	CertIssuer    string
	CertExpiresAt time.Time // zero when no certificate was seen
	CertValid     bool
	// CertError says what is wrong with the certificate, in words ("" when
	// nothing is).
	CertError string
	CheckedAt time.Time
}

// SetTunnelProbe stores a tunnel's latest probe; ErrNotFound when the
// tunnel is gone.
func (s *Store) SetTunnelProbe(ctx context.Context, p TunnelProbe) error {
	_, err := s.exec(ctx, `INSERT INTO tunnel_probes(tunnel_id, state, http_status, error, cert_issuer, cert_expires_at, cert_valid, cert_error, checked_at)
		SELECT id, CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS BIGINT),
			CAST(? AS TEXT), CAST(? AS BIGINT) FROM tunnels WHERE id = ?
		ON CONFLICT(tunnel_id) DO UPDATE SET state = excluded.state, http_status = excluded.http_status, error = excluded.error,
			cert_issuer = excluded.cert_issuer, cert_expires_at = excluded.cert_expires_at, cert_valid = excluded.cert_valid,
			cert_error = excluded.cert_error, checked_at = excluded.checked_at`,
		p.State, p.HTTPStatus, p.Error, p.CertIssuer, nullTime(p.CertExpiresAt), p.CertValid, p.CertError, p.CheckedAt.UnixMilli(), p.TunnelID)
	if err != nil {
		return err
	}
	if _, err := s.TunnelProbe(ctx, p.TunnelID); err != nil {
		return err
	}
	s.changed(TopicProbes)
	return nil
}

// TunnelProbe returns one tunnel's last probe, ErrNotFound when none.
func (s *Store) TunnelProbe(ctx context.Context, id int64) (TunnelProbe, error) {
	ps, err := s.tunnelProbes(ctx, " WHERE tunnel_id = ?", id)
	if err != nil {
		return TunnelProbe{}, err
	}
	p, ok := ps[id]
	if !ok {
		return p, ErrNotFound
	}
	return p, nil
}

// TunnelProbes returns every tunnel's last probe by tunnel id.
func (s *Store) TunnelProbes(ctx context.Context) (map[int64]TunnelProbe, error) {
	return s.tunnelProbes(ctx, "")
}

func (s *Store) tunnelProbes(ctx context.Context, where string, args ...any) (map[int64]TunnelProbe, error) {
	rows, err := s.query(ctx, `SELECT tunnel_id, state, http_status, error, cert_issuer, cert_expires_at, cert_valid, cert_error, checked_at
		FROM tunnel_probes`+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]TunnelProbe{}
	for rows.Next() {
		var p TunnelProbe
		var exp sql.NullInt64
		var checked int64
		if err := rows.Scan(&p.TunnelID, &p.State, &p.HTTPStatus, &p.Error, &p.CertIssuer, &exp, &p.CertValid, &p.CertError, &checked); err != nil {
			return nil, err
		}
		if exp.Valid {
			p.CertExpiresAt = time.UnixMilli(exp.Int64).UTC()
		}
		p.CheckedAt = time.UnixMilli(checked).UTC()
		out[p.TunnelID] = p
	}
	if err := rows.Err(); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	return out, nil
}
