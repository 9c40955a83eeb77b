package machines

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Machine is a machine as the API shows it.
type Machine struct {
	ID             int64      `json:"id"`
	Name           string     `json:"name"`
	Username       string     `json:"username"`
	Status         string     `json:"status"`
	CreatedAt      time.Time  `json:"created_at"`
	LastSeen       *time.Time `json:"last_seen"`
	ClientAddr     string     `json:"client_addr"`
	TunnelPort     int        `json:"tunnel_port"`
	AgentPort      int        `json:"agent_port"`
	AgentLocalPort int        `json:"agent_local_port"`
}

func toMachine(m store.Machine) Machine {
	out := Machine{ID: m.ID, Name: m.Name, Username: m.Username, Status: m.Status, CreatedAt: m.CreatedAt,
		ClientAddr: m.ClientAddr, TunnelPort: m.TunnelPort, AgentPort: m.AgentPort, AgentLocalPort: m.AgentLocalPort}
	if !m.LastSeen.IsZero() {
		seen := m.LastSeen
		out.LastSeen = &seen
	}
	return out
}

// Machines lists every machine.
func (s *Service) Machines(ctx context.Context) ([]Machine, error) {
	ms, err := s.Store.ListMachines(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Machine, 0, len(ms))
	for _, m := range ms {
		out = append(out, toMachine(m))
	}
	return out, nil
}

// Machine returns one machine.
func (s *Service) Machine(ctx context.Context, id int64) (Machine, error) {
	m, err := s.Store.GetMachine(ctx, id)
	return toMachine(m), err
}

// Rename sets a machine's display name.
func (s *Service) Rename(ctx context.Context, id int64, name string) (Machine, error) {
	name = strings.TrimSpace(name)
	if err := checkName("name", name); err != nil {
		return Machine{}, err
	}
	old, err := s.Store.GetMachine(ctx, id)
	if err != nil {
		return Machine{}, err
	}
	if err := s.Store.RenameMachine(ctx, id, name); err != nil {
		return Machine{}, err
	}
	s.event(ctx, store.Event{Source: "machine", Kind: "renamed", MachineID: id, Message: fmt.Sprintf("machine %q renamed to %q", old.Name, name)})
	return s.Machine(ctx, id)
}

// Delete removes a machine with its tunnels, ports and credential. From the
// next plugin call on, frps refuses it everything: logins, pings, work and
// user connections.
func (s *Service) Delete(ctx context.Context, id int64) error {
	m, err := s.Store.GetMachine(ctx, id)
	if err != nil {
		return err
	}
	if err := s.Store.DeleteMachine(ctx, id); err != nil {
		return err
	}
	s.event(ctx, store.Event{Source: "machine", Kind: "deleted", MachineID: id, Message: fmt.Sprintf("machine %q deleted", m.Name)})
	s.changed(id)
	return nil
}

// SelfDelete deletes the machine whose agent token this is.
func (s *Service) SelfDelete(ctx context.Context, agentToken string) (int64, error) {
	if agentToken == "" {
		return 0, ErrInvalidToken
	}
	m, err := s.Store.MachineByAgentTokenHash(ctx, auth.HashToken(agentToken))
	if errors.Is(err, store.ErrNotFound) {
		return 0, ErrInvalidToken
	}
	if err != nil {
		return 0, err
	}
	return m.ID, s.Delete(ctx, m.ID)
}

// Tunnel is a tunnel as the API shows it (spec issue 6).
type Tunnel struct {
	ID         int64     `json:"id"`
	MachineID  int64     `json:"machine_id"`
	Name       string    `json:"name"`
	Kind       string    `json:"kind"`
	LocalPort  int       `json:"local_port"`
	Subdomain  *string   `json:"subdomain"`
	Public     bool      `json:"public"`
	RemotePort int       `json:"remote_port"`
	Status     string    `json:"status"`
	CreatedAt  time.Time `json:"created_at"`
	// Access, AllowIPs and HasPassword: the access gate (http tunnels only).
	Access      string   `json:"access,omitempty"`
	AllowIPs    []string `json:"allow_ips,omitempty"`
	HasPassword bool     `json:"has_password,omitempty"`
}

func toTunnel(t store.Tunnel) Tunnel {
	out := Tunnel{ID: t.ID, MachineID: t.MachineID, Name: t.Name, Kind: t.Kind, LocalPort: t.LocalPort,
		Public: t.Public, RemotePort: t.RemotePort, Status: t.Status, CreatedAt: t.CreatedAt}
	if t.Kind == "http" {
		sub := t.Subdomain
		out.Subdomain = &sub
	}
	return out
}

// TunnelInput is POST /api/tunnels's body; PATCH uses the same fields, nil
// meaning "unchanged".
type TunnelInput struct {
	MachineID *int64  `json:"machine_id"`
	Name      *string `json:"name"`
	Kind      *string `json:"kind"`
	LocalPort *int    `json:"local_port"`
	Subdomain *string `json:"subdomain"`
	Public    *bool   `json:"public"`
	// The access gate of an http tunnel (see access.go).
	Access   *string   `json:"access"`
	Password *string   `json:"password"`
	AllowIPs *[]string `json:"allow_ips"`
}

// Tunnels lists tunnels, of one machine when machineID is not 0.
func (s *Service) Tunnels(ctx context.Context, machineID int64) ([]Tunnel, error) {
	ts, err := s.Store.ListTunnels(ctx, machineID)
	if err != nil {
		return nil, err
	}
	out := make([]Tunnel, 0, len(ts))
	for _, t := range ts {
		out = append(out, toTunnel(t))
	}
	return out, s.showAccess(ctx, out)
}

// Tunnel returns one tunnel.
func (s *Service) Tunnel(ctx context.Context, id int64) (Tunnel, error) {
	t, err := s.Store.GetTunnel(ctx, id)
	if err != nil {
		return Tunnel{}, err
	}
	out := toTunnel(t)
	if t.Kind == "http" {
		a, err := s.Store.TunnelAccessOf(ctx, id)
		if err != nil {
			return Tunnel{}, err
		}
		out.setAccess(a)
	}
	return out, nil
}

// validateTunnel checks every field of t, the merged state after a create
// or an update.
func validateTunnel(t store.Tunnel) error {
	if err := checkLabel("name", t.Name); err != nil {
		return err
	}
	switch t.Kind {
	case "http":
		if t.Subdomain == "" {
			return InputError("subdomain is required for http tunnels")
		}
		if err := checkLabel("subdomain", t.Subdomain); err != nil {
			return err
		}
		if t.Public {
			return InputError("public is only for tcp tunnels")
		}
	case "tcp":
		if t.Subdomain != "" {
			return InputError("subdomain is only for http tunnels")
		}
	case "":
		return InputError("kind is required")
	default:
		return InputError(`kind must be "http" or "tcp"`)
	}
	if t.LocalPort < 1 || t.LocalPort > 65535 {
		return InputError("local_port must be between 1 and 65535")
	}
	return nil
}

// checkLabel: a hostname label (spec §4.2 note 3), lower-cased by the caller.
func checkLabel(field, v string) error {
	if v == "" {
		return InputError(field + " is required")
	}
	if len(v) > 63 {
		return InputError(field + " must be at most 63 characters")
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
		if !alnum && !(c == '-' && i > 0 && i < len(v)-1) {
			return InputError(field + " must be a hostname label: lowercase letters, digits and inner hyphens")
		}
	}
	return nil
}

func conflict(err error) error {
	var c *store.ConflictError
	if errors.As(err, &c) {
		return InputError(c.Field + " is already in use")
	}
	if errors.Is(err, store.ErrNoFreePort) {
		return InputError(err.Error())
	}
	return err
}

// CreateTunnel validates and stores a tunnel with a newly allocated remote
// port. frps is not touched: the plugin accepts the new proxy as soon as
// the machine's frpc asks for it.
func (s *Service) CreateTunnel(ctx context.Context, in TunnelInput) (Tunnel, error) {
	if in.MachineID == nil {
		return Tunnel{}, InputError("machine_id is required")
	}
	t := store.Tunnel{MachineID: *in.MachineID, Name: lower(in.Name), Kind: deref(in.Kind), Subdomain: lower(in.Subdomain)}
	if in.LocalPort != nil {
		t.LocalPort = *in.LocalPort
	} else {
		return Tunnel{}, InputError("local_port is required")
	}
	if in.Public != nil {
		t.Public = *in.Public
	}
	if err := validateTunnel(t); err != nil {
		return Tunnel{}, err
	}
	access, err := planAccess(t, store.TunnelAccess{Access: "public"}, in)
	if err != nil {
		return Tunnel{}, err
	}
	if err := access.hash(); err != nil {
		return Tunnel{}, err
	}
	created, err := s.Store.InsertTunnel(ctx, t, s.Ports, s.now())
	if errors.Is(err, store.ErrNotFound) {
		return Tunnel{}, InputError(fmt.Sprintf("machine %d does not exist", t.MachineID))
	}
	if err != nil {
		return Tunnel{}, conflict(err)
	}
	if access.changed {
		access.next.TunnelID = created.ID
		if err := s.Store.SetTunnelAccess(ctx, access.next); err != nil {
			// Never leave a tunnel public that was asked for with a gate.
			s.Store.DeleteTunnel(ctx, created.ID)
			return Tunnel{}, err
		}
	}
	s.event(ctx, store.Event{Source: "tunnel", Kind: "created", MachineID: created.MachineID, TunnelID: created.ID,
		Message: fmt.Sprintf("%s tunnel %q created: local port %d, remote port %d", created.Kind, created.Name, created.LocalPort, created.RemotePort)})
	s.changed(created.MachineID)
	return s.Tunnel(ctx, created.ID)
}

// UpdateTunnel changes name, local_port, subdomain or public. kind and
// machine_id are fixed at creation.
func (s *Service) UpdateTunnel(ctx context.Context, id int64, in TunnelInput) (Tunnel, error) {
	t, err := s.Store.GetTunnel(ctx, id)
	if err != nil {
		return Tunnel{}, err
	}
	if in.Kind != nil && *in.Kind != t.Kind {
		return Tunnel{}, InputError("kind cannot be changed; delete the tunnel and create another")
	}
	if in.MachineID != nil && *in.MachineID != t.MachineID {
		return Tunnel{}, InputError("machine_id cannot be changed")
	}
	if in.Name != nil {
		t.Name = lower(in.Name)
	}
	if in.LocalPort != nil {
		t.LocalPort = *in.LocalPort
	}
	if in.Subdomain != nil {
		t.Subdomain = lower(in.Subdomain)
	}
	if in.Public != nil {
		t.Public = *in.Public
	}
	if err := validateTunnel(t); err != nil {
		return Tunnel{}, err
	}
	cur, err := s.currentAccess(ctx, t.ID)
	if err != nil {
		return Tunnel{}, err
	}
	access, err := planAccess(t, cur, in)
	if err != nil {
		return Tunnel{}, err
	}
	if err := access.hash(); err != nil {
		return Tunnel{}, err
	}
	if err := s.Store.UpdateTunnel(ctx, t); err != nil {
		return Tunnel{}, conflict(err)
	}
	if access.changed {
		if err := s.Store.SetTunnelAccess(ctx, access.next); err != nil {
			return Tunnel{}, err
		}
	}
	s.event(ctx, store.Event{Source: "tunnel", Kind: "updated", MachineID: t.MachineID, TunnelID: t.ID,
		Message: fmt.Sprintf("tunnel %q updated", t.Name)})
	s.changed(t.MachineID)
	return s.Tunnel(ctx, id)
}

// DeleteTunnel removes a tunnel and frees its port; the plugin refuses its
// connections from then on.
func (s *Service) DeleteTunnel(ctx context.Context, id int64) error {
	t, err := s.Store.GetTunnel(ctx, id)
	if err != nil {
		return err
	}
	if err := s.Store.DeleteTunnel(ctx, id); err != nil {
		return err
	}
	s.event(ctx, store.Event{Source: "tunnel", Kind: "deleted", MachineID: t.MachineID, TunnelID: t.ID,
		Message: fmt.Sprintf("tunnel %q deleted", t.Name)})
	s.changed(t.MachineID)
	return nil
}

// Activity is the feed of spec §4.2: the 25 newest machine events and the 25
// newest tunnel events, merged newest first.
func (s *Service) Activity(ctx context.Context) ([]store.Event, error) {
	return s.Store.RecentEvents(ctx, ActivityPerSource)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return strings.TrimSpace(*p)
}

func lower(p *string) string { return strings.ToLower(deref(p)) }
