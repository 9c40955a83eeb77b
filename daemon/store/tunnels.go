package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Tunnel is one tunnel of a machine. Subdomain is empty for tcp tunnels.
type Tunnel struct {
	ID         int64
	MachineID  int64
	Name       string
	Kind       string
	LocalPort  int
	Subdomain  string
	Public     bool
	RemotePort int
	Status     string
	CreatedAt  time.Time
	// Paused: closed until resumed (left out of the client config and the
	// Caddyfile, refused by the frps plugin).
	Paused bool
	// Balance picks among an http tunnel's targets (its own machine, then
	// the rows of tunnel_targets): "failover" or "round_robin".
	Balance string
	// Health is the web proxy's active health check of each target
	// (Path "" for none).
	Health Health
	// ProxyProtocol is the PROXY protocol header the tunnel's service gets
	// before each connection: "" (none), "v1" or "v2".
	ProxyProtocol string
	// Fallback is the message an http tunnel's site answers with (503)
	// while every machine serving it is down ("" none).
	Fallback string
}

// Health is an http tunnel's active health check: GET Path on each target
// every IntervalS seconds, healthy when it answers ExpectStatus (0: any
// 2xx).
type Health struct {
	Path         string
	IntervalS    int
	ExpectStatus int
}

const tunnelSelect = "SELECT id, machine_id, name, kind, local_port, COALESCE(subdomain, ''), public, remote_port, status, created_at, paused, balance, health_path, health_interval_s, health_expect_status, proxy_protocol, fallback_message FROM tunnels"

func scanTunnel(r rowScanner) (Tunnel, error) {
	var t Tunnel
	var created int64
	err := r.Scan(&t.ID, &t.MachineID, &t.Name, &t.Kind, &t.LocalPort, &t.Subdomain, &t.Public, &t.RemotePort, &t.Status, &created, &t.Paused,
		&t.Balance, &t.Health.Path, &t.Health.IntervalS, &t.Health.ExpectStatus, &t.ProxyProtocol, &t.Fallback)
	if errors.Is(err, sql.ErrNoRows) {
		return t, ErrNotFound
	}
	t.CreatedAt = time.UnixMilli(created).UTC()
	return t, err
}

// ConflictError names the field whose value is already taken.
type ConflictError struct{ Field string }

func (e *ConflictError) Error() string { return e.Field + " is already in use" }
func (e *ConflictError) Unwrap() error { return ErrConflict }

func tunnelConflict(err error) error {
	c, ok := uniqueViolation(err)
	if !ok {
		return err
	}
	switch c {
	case constraintSubdomain:
		return &ConflictError{Field: "subdomain"}
	case constraintTunnelName:
		return &ConflictError{Field: "name"}
	}
	return err
}

// InsertTunnel allocates a remote port and stores t; ErrNotFound when the
// machine does not exist, a *ConflictError for a taken name or subdomain.
func (s *Store) InsertTunnel(ctx context.Context, t Tunnel, r PortRange, now time.Time) (Tunnel, error) {
	return s.InsertTunnelParts(ctx, t, nil, nil, nil, r, now)
}

// InsertTunnelParts is InsertTunnel with, when they are not nil, the
// tunnel's access gate, its own domains and its targets, in one
// transaction: the tunnel is made whole or not at all, and no other edge
// sees it half made.
func (s *Store) InsertTunnelParts(ctx context.Context, t Tunnel, access *TunnelAccess, domains *[]string, targets *[]TargetSpec, r PortRange, now time.Time) (Tunnel, error) {
	var out Tunnel
	err := s.Tx(ctx, func(tx *Tx) (err error) {
		out, err = insertTunnelParts(ctx, tx, TunnelWrite{Tunnel: t, Access: access, Domains: domains, Targets: targets}, r, now)
		return err
	})
	return out, s.announce(err, TopicTunnels)
}

// insertTunnelParts is InsertTunnelParts within tx.
func insertTunnelParts(ctx context.Context, tx *Tx, w TunnelWrite, r PortRange, now time.Time) (Tunnel, error) {
	t := w.Tunnel
	var one int
	if err := tx.queryRow(ctx, "SELECT 1 FROM machines WHERE id = ?", t.MachineID).Scan(&one); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return Tunnel{}, ErrNotFound
		}
		return Tunnel{}, err
	}
	port, err := allocatePort(ctx, tx, r, t.MachineID, "tunnel")
	if err != nil {
		return Tunnel{}, err
	}
	id, err := tx.insertID(ctx, `INSERT INTO tunnels(machine_id, name, kind, local_port, subdomain, public, remote_port, created_at, paused,
			balance, health_path, health_interval_s, health_expect_status, proxy_protocol, fallback_message)
		VALUES (?, ?, ?, ?, NULLIF(?, ''), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, t.MachineID, t.Name, t.Kind, t.LocalPort, t.Subdomain, t.Public, port, now.UnixMilli(), t.Paused,
		balanceOr(t.Balance), t.Health.Path, t.Health.IntervalS, t.Health.ExpectStatus, t.ProxyProtocol, t.Fallback)
	if err != nil {
		return Tunnel{}, tunnelConflict(err)
	}
	if w.Access != nil {
		a := *w.Access
		a.TunnelID = id
		if err := affectOne(tx.exec(ctx, setTunnelAccess, setTunnelAccessArgs(a)...)); err != nil {
			return Tunnel{}, err
		}
	}
	if w.Domains != nil && len(*w.Domains) > 0 {
		if err := setDomains(ctx, tx, id, *w.Domains); err != nil {
			return Tunnel{}, err
		}
	}
	if w.Targets != nil && len(*w.Targets) > 0 {
		if _, err := setTargets(ctx, tx, id, *w.Targets, r); err != nil {
			return Tunnel{}, err
		}
	}
	return scanTunnel(tx.queryRow(ctx, tunnelSelect+" WHERE id = ?", id))
}

const updateTunnel = `UPDATE tunnels SET name = ?, local_port = ?, subdomain = NULLIF(?, ''), public = ?, paused = ?,
	balance = ?, health_path = ?, health_interval_s = ?, health_expect_status = ?, proxy_protocol = ?, fallback_message = ? WHERE id = ?`

func updateTunnelArgs(t Tunnel) []any {
	return []any{t.Name, t.LocalPort, t.Subdomain, t.Public, t.Paused, balanceOr(t.Balance), t.Health.Path, t.Health.IntervalS, t.Health.ExpectStatus, t.ProxyProtocol, t.Fallback, t.ID}
}

// balanceOr is b, or the default balance when it is empty.
func balanceOr(b string) string {
	if b == "" {
		return "failover"
	}
	return b
}

// UpdateTunnel writes name, local_port, subdomain, public, paused, balance,
// health, proxy_protocol and fallback of t.
func (s *Store) UpdateTunnel(ctx context.Context, t Tunnel) error {
	res, err := s.exec(ctx, updateTunnel, updateTunnelArgs(t)...)
	if err != nil {
		return tunnelConflict(err)
	}
	return s.announce(affectOne(res, nil), TopicTunnels)
}

// SetTunnelStatus records a tunnel's live status.
func (s *Store) SetTunnelStatus(ctx context.Context, id int64, status string) error {
	return s.announce(affectOne(s.exec(ctx, "UPDATE tunnels SET status = ? WHERE id = ?", status, id)), TopicTunnelStatus)
}

// GetTunnel returns one tunnel or ErrNotFound.
func (s *Store) GetTunnel(ctx context.Context, id int64) (Tunnel, error) {
	return scanTunnel(s.queryRow(ctx, tunnelSelect+" WHERE id = ?", id))
}

// ListTunnels returns the tunnels of machineID, or of every machine when it
// is 0, oldest first.
func (s *Store) ListTunnels(ctx context.Context, machineID int64) ([]Tunnel, error) {
	q, args := tunnelSelect+" ORDER BY id", []any{}
	if machineID != 0 {
		q, args = tunnelSelect+" WHERE machine_id = ? ORDER BY id", []any{machineID}
	}
	return s.queryTunnels(ctx, q, args...)
}

// queryTunnels reads the tunnels query q selects (tunnelSelect and more).
func (s *Store) queryTunnels(ctx context.Context, q string, args ...any) ([]Tunnel, error) {
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Tunnel{}
	for rows.Next() {
		t, err := scanTunnel(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// ListCheckedTunnels returns the http tunnels that have a health check and
// are not paused, oldest first: the few the health checker reads every
// second, without reading every tunnel.
func (s *Store) ListCheckedTunnels(ctx context.Context) ([]Tunnel, error) {
	return s.queryTunnels(ctx, tunnelSelect+" WHERE kind = 'http' AND health_path != '' AND paused = 0 ORDER BY id")
}

// DeleteTunnel removes a tunnel and frees its port.
func (s *Store) DeleteTunnel(ctx context.Context, id int64) error {
	err := s.Tx(ctx, func(tx *Tx) error { return deleteTunnel(ctx, tx, id) })
	return s.announce(err, TopicTunnels)
}

// deleteTunnel is DeleteTunnel within tx.
func deleteTunnel(ctx context.Context, tx *Tx, id int64) error {
	var port int
	if err := tx.queryRow(ctx, "SELECT remote_port FROM tunnels WHERE id = ?", id).Scan(&port); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		return err
	}
	if err := deleteTargets(ctx, tx, "tunnel_id = ?", id); err != nil {
		return err
	}
	if _, err := tx.exec(ctx, "DELETE FROM tunnels WHERE id = ?", id); err != nil {
		return err
	}
	if _, err := tx.exec(ctx, "DELETE FROM ports WHERE port = ?", port); err != nil {
		return fmt.Errorf("free port %d: %w", port, err)
	}
	return nil
}

// Event is one machine or tunnel activity event.
type Event struct {
	ID        int64     `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Source    string    `json:"source"`
	Kind      string    `json:"kind"`
	MachineID int64     `json:"machine_id,omitempty"`
	TunnelID  int64     `json:"tunnel_id,omitempty"`
	Message   string    `json:"message"`
	// Edge is the edge that saw it ("" on a box that is not in a cluster
	// of several, and before edges).
	Edge string `json:"edge,omitempty"`
}

// InsertEvent appends an activity event.
func (s *Store) InsertEvent(ctx context.Context, e Event) error {
	_, err := s.exec(ctx,
		"INSERT INTO activity_events(created_at, source, kind, machine_id, tunnel_id, message, edge) VALUES (?, ?, ?, NULLIF(?, 0), NULLIF(?, 0), ?, ?)",
		e.CreatedAt.UnixMilli(), e.Source, e.Kind, e.MachineID, e.TunnelID, e.Message, e.Edge)
	return s.announce(err, TopicActivity)
}

// MachineEvents returns the newest limit events of one machine (its own
// and its tunnels'), newest first.
func (s *Store) MachineEvents(ctx context.Context, machineID int64, limit int) ([]Event, error) {
	rows, err := s.query(ctx, `SELECT id, created_at, source, kind, COALESCE(machine_id, 0), COALESCE(tunnel_id, 0), message, edge
		FROM activity_events WHERE machine_id = ? ORDER BY created_at DESC, id DESC LIMIT ?`, machineID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanEvents(rows)
}

func scanEvents(rows *sql.Rows) ([]Event, error) {
	out := []Event{}
	for rows.Next() {
		var e Event
		var ms int64
		if err := rows.Scan(&e.ID, &ms, &e.Source, &e.Kind, &e.MachineID, &e.TunnelID, &e.Message, &e.Edge); err != nil {
			return nil, err
		}
		e.CreatedAt = time.UnixMilli(ms).UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}

// RecentEvents returns the perSource newest events of each source, merged
// newest first.
func (s *Store) RecentEvents(ctx context.Context, perSource int) ([]Event, error) {
	rows, err := s.query(ctx, `SELECT id, created_at, source, kind, COALESCE(machine_id, 0), COALESCE(tunnel_id, 0), message, edge FROM (
		SELECT * FROM (SELECT * FROM activity_events WHERE source = 'machine' ORDER BY created_at DESC, id DESC LIMIT ?) AS m
		UNION ALL
		SELECT * FROM (SELECT * FROM activity_events WHERE source = 'tunnel' ORDER BY created_at DESC, id DESC LIMIT ?) AS t
	) AS e ORDER BY created_at DESC, id DESC`, perSource, perSource)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Event{}
	for rows.Next() {
		var e Event
		var ms int64
		if err := rows.Scan(&e.ID, &ms, &e.Source, &e.Kind, &e.MachineID, &e.TunnelID, &e.Message, &e.Edge); err != nil {
			return nil, err
		}
		e.CreatedAt = time.UnixMilli(ms).UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}
