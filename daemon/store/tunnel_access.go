package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
)

// TunnelAccess is who may reach an HTTP tunnel through the web proxy.
// Access is "public", "operator" or "password"; PasswordHash is the shared
// password's argon2id hash in password mode; AllowIPs are normalised
// addresses and CIDRs, empty meaning any address.
type TunnelAccess struct {
	TunnelID     int64
	Subdomain    string
	Access       string
	PasswordHash string
	AllowIPs     []string
	// SSOAllow lists who may enter in mode "sso": emails, "@domain"s and
	// "group:name"s.
	SSOAllow []string
}

const accessSelect = "SELECT id, COALESCE(subdomain, ''), access, access_password_hash, allow_ips, sso_allow FROM tunnels"

func scanAccess(r rowScanner) (TunnelAccess, error) {
	var a TunnelAccess
	var ips, sso string
	err := r.Scan(&a.TunnelID, &a.Subdomain, &a.Access, &a.PasswordHash, &ips, &sso)
	if errors.Is(err, sql.ErrNoRows) {
		return a, ErrNotFound
	}
	if ips != "" {
		a.AllowIPs = strings.Split(ips, ",")
	}
	if sso != "" {
		a.SSOAllow = strings.Split(sso, ",")
	}
	return a, err
}

// TunnelAccessOf returns one tunnel's access settings or ErrNotFound.
func (s *Store) TunnelAccessOf(ctx context.Context, id int64) (TunnelAccess, error) {
	return scanAccess(s.queryRow(ctx, accessSelect+" WHERE id = ?", id))
}

// HTTPTunnelAccess returns the access settings of every http tunnel.
func (s *Store) HTTPTunnelAccess(ctx context.Context) ([]TunnelAccess, error) {
	rows, err := s.query(ctx, accessSelect+" WHERE kind = 'http' AND subdomain IS NOT NULL ORDER BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []TunnelAccess
	for rows.Next() {
		a, err := scanAccess(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// setTunnelAccess writes a tunnel's access settings (its Subdomain is
// ignored), within the transaction that writes the tunnel.
const setTunnelAccess = "UPDATE tunnels SET access = ?, access_password_hash = ?, allow_ips = ?, sso_allow = ? WHERE id = ?"

func setTunnelAccessArgs(a TunnelAccess) []any {
	return []any{a.Access, a.PasswordHash, strings.Join(a.AllowIPs, ","), strings.Join(a.SSOAllow, ","), a.TunnelID}
}
