package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Target is one more machine serving an http tunnel, besides the
// tunnel's own: the machine's frpc opens RemotePort (held by that machine
// in ports) to LocalPort on it, and the web proxy balances the tunnel's
// subdomain over the tunnel's own port and its targets'.
type Target struct {
	ID         int64
	TunnelID   int64
	MachineID  int64
	LocalPort  int
	RemotePort int
	// Position orders a tunnel's targets (after its own machine): the
	// order "failover" tries them in.
	Position int
	// Status is the target's proxy on the tunnel server: pending, online
	// or offline, as Tunnel.Status.
	Status string
	// Paused is the tunnel's: a paused tunnel's targets are closed too.
	Paused bool
}

// TargetSpec is a target asked for: a machine and its port.
type TargetSpec struct {
	MachineID int64
	LocalPort int
}

const targetSelect = `SELECT tt.id, tt.tunnel_id, tt.machine_id, tt.local_port, tt.remote_port, tt.position, tt.status, t.paused
	FROM tunnel_targets tt JOIN tunnels t ON t.id = tt.tunnel_id`

func scanTarget(r rowScanner) (Target, error) {
	var t Target
	err := r.Scan(&t.ID, &t.TunnelID, &t.MachineID, &t.LocalPort, &t.RemotePort, &t.Position, &t.Status, &t.Paused)
	if errors.Is(err, sql.ErrNoRows) {
		return t, ErrNotFound
	}
	return t, err
}

// SetTargets makes the extra targets of tunnel tunnelID exactly want, in
// that order. A target already there (same machine and port) keeps its
// remote port and status; one no longer wanted is removed and its port
// freed; a new one gets a port from r, held by its machine. ErrNotFound
// when the tunnel does not exist; a *MissingMachineError when a machine
// does not.
func (s *Store) SetTargets(ctx context.Context, tunnelID int64, want []TargetSpec, r PortRange) ([]Target, error) {
	var out []Target
	err := s.Tx(ctx, func(tx *Tx) error {
		var err error
		out, err = setTargets(ctx, tx, tunnelID, want, r)
		return err
	})
	return out, s.announce(err, TopicTunnels)
}

// UpdateTunnelParts is UpdateTunnel and, when they are not nil,
// SetTargets and SetTunnelDomains, in one transaction: all or nothing.
func (s *Store) UpdateTunnelParts(ctx context.Context, t Tunnel, access *TunnelAccess, want *[]TargetSpec, domains *[]string, r PortRange) error {
	err := s.Tx(ctx, func(tx *Tx) error {
		return updateTunnelParts(ctx, tx, TunnelWrite{Tunnel: t, Access: access, Targets: want, Domains: domains}, r)
	})
	return s.announce(err, TopicTunnels)
}

// updateTunnelParts is UpdateTunnelParts within tx.
func updateTunnelParts(ctx context.Context, tx *Tx, w TunnelWrite, r PortRange) error {
	if err := affectOne(tx.exec(ctx, updateTunnel, updateTunnelArgs(w.Tunnel)...)); err != nil {
		return tunnelConflict(err)
	}
	if w.Access != nil {
		if err := affectOne(tx.exec(ctx, setTunnelAccess, setTunnelAccessArgs(*w.Access)...)); err != nil {
			return err
		}
	}
	if w.Domains != nil {
		if err := setDomains(ctx, tx, w.Tunnel.ID, *w.Domains); err != nil {
			return err
		}
	}
	if w.Targets == nil {
		return nil
	}
	_, err := setTargets(ctx, tx, w.Tunnel.ID, *w.Targets, r)
	return err
}

func setTargets(ctx context.Context, tx *Tx, tunnelID int64, want []TargetSpec, r PortRange) ([]Target, error) {
	var out []Target
	err := func() error {
		var one int
		if err := tx.queryRow(ctx, "SELECT 1 FROM tunnels WHERE id = ?", tunnelID).Scan(&one); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return ErrNotFound
			}
			return err
		}
		have, err := queryTargets(ctx, tx, targetSelect+" WHERE tt.tunnel_id = ? ORDER BY tt.position", tunnelID)
		if err != nil {
			return err
		}
		kept := map[int64]bool{}
		for i, w := range want {
			if err := tx.queryRow(ctx, "SELECT 1 FROM machines WHERE id = ?", w.MachineID).Scan(&one); err != nil {
				if errors.Is(err, sql.ErrNoRows) {
					return &MissingMachineError{ID: w.MachineID}
				}
				return err
			}
			found := false
			for _, h := range have {
				if h.MachineID == w.MachineID && h.LocalPort == w.LocalPort {
					found, kept[h.ID] = true, true
					if _, err := tx.exec(ctx, "UPDATE tunnel_targets SET position = ? WHERE id = ?", i+1, h.ID); err != nil {
						return err
					}
				}
			}
			if found {
				continue
			}
			port, err := allocatePort(ctx, tx, r, w.MachineID, "tunnel")
			if err != nil {
				return err
			}
			if _, err := tx.exec(ctx, "INSERT INTO tunnel_targets(tunnel_id, machine_id, local_port, remote_port, position) VALUES (?, ?, ?, ?, ?)",
				tunnelID, w.MachineID, w.LocalPort, port, i+1); err != nil {
				return err
			}
		}
		for _, h := range have {
			if !kept[h.ID] {
				if err := deleteTargets(ctx, tx, "id = ?", h.ID); err != nil {
					return err
				}
			}
		}
		out, err = queryTargets(ctx, tx, targetSelect+" WHERE tt.tunnel_id = ? ORDER BY tt.position", tunnelID)
		return err
	}()
	return out, err
}

// MissingMachineError names a target's machine that does not exist.
type MissingMachineError struct{ ID int64 }

func (e *MissingMachineError) Error() string { return fmt.Sprintf("machine %d does not exist", e.ID) }
func (e *MissingMachineError) Unwrap() error { return ErrNotFound }

// ListTargets returns the targets served by machine machineID (every
// machine's when 0), by tunnel and position.
func (s *Store) ListTargets(ctx context.Context, machineID int64) ([]Target, error) {
	if machineID == 0 {
		return queryTargets(ctx, s, targetSelect+" ORDER BY tt.tunnel_id, tt.position")
	}
	return queryTargets(ctx, s, targetSelect+" WHERE tt.machine_id = ? ORDER BY tt.tunnel_id, tt.position", machineID)
}

// TargetsOf returns tunnel tunnelID's targets, in order.
func (s *Store) TargetsOf(ctx context.Context, tunnelID int64) ([]Target, error) {
	return queryTargets(ctx, s, targetSelect+" WHERE tt.tunnel_id = ? ORDER BY tt.position", tunnelID)
}

// GetTarget returns one target or ErrNotFound.
func (s *Store) GetTarget(ctx context.Context, id int64) (Target, error) {
	return scanTarget(s.queryRow(ctx, targetSelect+" WHERE tt.id = ?", id))
}

// SetTargetStatus records a target's proxy status (pending, online,
// offline).
func (s *Store) SetTargetStatus(ctx context.Context, id int64, status string) error {
	return s.announce(affectOne(s.exec(ctx, "UPDATE tunnel_targets SET status = ? WHERE id = ?", status, id)), TopicTunnelStatus)
}

// querier is what the store and a transaction both read with.
type querier interface {
	query(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func queryTargets(ctx context.Context, q querier, query string, args ...any) ([]Target, error) {
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Target{}
	for rows.Next() {
		t, err := scanTarget(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// deleteTargets removes the targets matching where (on tunnel_targets'
// own columns) and frees their ports.
func deleteTargets(ctx context.Context, tx *Tx, where string, args ...any) error {
	rows, err := tx.query(ctx, "SELECT remote_port FROM tunnel_targets WHERE "+where, args...)
	if err != nil {
		return err
	}
	var ports []int
	for rows.Next() {
		var p int
		if err := rows.Scan(&p); err != nil {
			rows.Close()
			return err
		}
		ports = append(ports, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(ports) == 0 {
		return nil
	}
	if _, err := tx.exec(ctx, "DELETE FROM tunnel_targets WHERE "+where, args...); err != nil {
		return err
	}
	for _, p := range ports {
		if _, err := tx.exec(ctx, "DELETE FROM ports WHERE port = ?", p); err != nil {
			return fmt.Errorf("free port %d: %w", p, err)
		}
	}
	return nil
}
