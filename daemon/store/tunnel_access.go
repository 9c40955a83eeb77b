package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
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
	// Rules are checked in order before the gate; the first whose path
	// matches decides (none: the gate).
	Rules []AccessRule
	// RememberDays is how long a password or sso gate's session lasts,
	// in days (0: a day).
	RememberDays int
	// Epoch grows each time the operator ends the tunnel's visitor
	// sessions (EndVisitorSessions).
	Epoch int64
}

// AccessRule is one path rule of a gated site: requests whose path is
// Path (or, when Path ends with "*", starts with what precedes it) are let
// through ("allow"), asked of the gate ("gate") or refused ("deny").
type AccessRule struct {
	Path   string `json:"path"`
	Action string `json:"action"`
}

const accessSelect = "SELECT id, COALESCE(subdomain, ''), access, access_password_hash, allow_ips, sso_allow, access_rules, remember_days, gate_epoch FROM tunnels"

func scanAccess(r rowScanner) (TunnelAccess, error) {
	var a TunnelAccess
	var ips, sso, rules string
	err := r.Scan(&a.TunnelID, &a.Subdomain, &a.Access, &a.PasswordHash, &ips, &sso, &rules, &a.RememberDays, &a.Epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return a, ErrNotFound
	}
	if err == nil && rules != "" {
		if err = json.Unmarshal([]byte(rules), &a.Rules); err != nil {
			return a, fmt.Errorf("tunnel %d: its stored access rules: %w", a.TunnelID, err)
		}
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
const setTunnelAccess = "UPDATE tunnels SET access = ?, access_password_hash = ?, allow_ips = ?, sso_allow = ?, access_rules = ?, remember_days = ? WHERE id = ?"

func setTunnelAccessArgs(a TunnelAccess) []any {
	rules := ""
	if len(a.Rules) > 0 {
		b, _ := json.Marshal(a.Rules)
		rules = string(b)
	}
	return []any{a.Access, a.PasswordHash, strings.Join(a.AllowIPs, ","), strings.Join(a.SSOAllow, ","), rules, a.RememberDays, a.TunnelID}
}

// EndVisitorSessions ends every visitor session and sign-in code of a
// tunnel's gate, on every edge: the shared ones go now, and each edge's
// gate ends those it holds in memory at its next reload, seeing the
// tunnel's epoch grow.
func (s *Store) EndVisitorSessions(ctx context.Context, tunnelID int64) error {
	err := s.Tx(ctx, func(tx *Tx) error {
		if err := affectOne(tx.exec(ctx, "UPDATE tunnels SET gate_epoch = gate_epoch + 1 WHERE id = ?", tunnelID)); err != nil {
			return err
		}
		_, err := tx.exec(ctx, "DELETE FROM gate_tokens WHERE tunnel_id = ?", tunnelID)
		return err
	})
	return s.announce(err, TopicTunnels)
}
