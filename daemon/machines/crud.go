package machines

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/alessio/shellescape"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

// Machine is a machine as the API shows it.
type Machine struct {
	ID             int64             `json:"id"`
	Name           string            `json:"name"`
	Username       string            `json:"username"`
	Status         string            `json:"status"`
	StatusReason   string            `json:"status_reason"`
	CreatedAt      time.Time         `json:"created_at"`
	LastSeen       *time.Time        `json:"last_seen"`
	ClientAddr     string            `json:"client_addr"`
	TunnelPort     int               `json:"tunnel_port"`
	AgentPort      int               `json:"agent_port"`
	AgentLocalPort int               `json:"agent_local_port"`
	ConfigPush     *store.ConfigPush `json:"config_push"`
	AgentOutdated  bool              `json:"agent_outdated"`
	SSHKeyID       string            `json:"ssh_key_id"`
	SSHCommand     string            `json:"ssh_command"`
	SSHDirect      bool              `json:"ssh_direct"`
	// Config is the machine's desired and applied client-config generation.
	Config ConfigView `json:"config"`
	// What the machine's agent last reported ("" when never).
	AgentVersion  string `json:"agent_version"`
	ClientVersion string `json:"client_version"`
	BundleVersion string `json:"bundle_version"`
	// Update says whether the machine runs the server's bundle.
	Update UpdateView `json:"update"`
	// Transport is how the machine reaches the tunnel server.
	Transport TransportView `json:"transport"`
	// Serves are its parts in sites served by several machines, beyond a
	// tunnel's own port (GET /api/machines/{id} only).
	Serves []ServedPart `json:"serves,omitempty"`
	// Edges is what each edge of the cluster saw of the machine, in edge
	// order (empty before any edge saw it); the machine is online when
	// one edge that is up has it.
	Edges []EdgeView `json:"edges"`
}

// EdgeView is one edge's view of a machine's connection.
type EdgeView struct {
	EdgeID   int64      `json:"edge_id"`
	Edge     string     `json:"edge"`
	Status   string     `json:"status"` // online, offline, or edge_down
	LastSeen *time.Time `json:"last_seen"`
}

// edgeViews returns each machine's edges as the API shows them.
func (s *Service) edgeViews(ctx context.Context) (map[int64][]EdgeView, error) {
	conns, err := s.Store.MachineEdges(ctx)
	if err != nil || len(conns) == 0 {
		return nil, err
	}
	list, err := s.Store.ListEdges(ctx)
	if err != nil {
		return nil, err
	}
	edges := make(map[int64]store.Edge, len(list))
	for _, e := range list {
		edges[e.ID] = e
	}
	now := s.now()
	out := make(map[int64][]EdgeView, len(conns))
	for id, cs := range conns {
		for _, c := range cs {
			e, ok := edges[c.EdgeID]
			if !ok {
				continue
			}
			v := EdgeView{EdgeID: c.EdgeID, Edge: e.Name, Status: c.Status}
			if c.Status == "online" && !e.Up(now) {
				v.Status = "edge_down"
			}
			if !c.LastSeen.IsZero() {
				t := c.LastSeen
				v.LastSeen = &t
			}
			out[id] = append(out[id], v)
		}
	}
	return out, nil
}

// UpdateView is a machine's standing against the server's bundle.
type UpdateView struct {
	// State: current, outdated, updating, failed, rolled_back, unsupported.
	State         string     `json:"state"`
	TargetVersion string     `json:"target_version"`
	Error         string     `json:"error"`
	At            *time.Time `json:"at"`
	// RejoinCommand is the line to run on an unsupported machine ("" until
	// the daemon can give one).
	RejoinCommand string `json:"rejoin_command"`
	// CanUpdate: POST /api/machines/{id}/update can work now. When the
	// machine needs an update (outdated, failed, rolled back) but cannot
	// take one now, Blocked says why.
	CanUpdate bool   `json:"can_update"`
	Blocked   string `json:"blocked,omitempty"`
}

// Update states beyond the fleet's: "unknown" while the machine's agent has
// not reported the bundle it runs (nothing says it is outdated).
const updateUnknown = "unknown"

// updateView is updateState, and whether the machine's status st lets an
// update that it needs reach its agent now.
func updateView(m store.Machine, server string, st Status) UpdateView {
	v := updateState(m, server)
	switch v.State {
	case "outdated", "failed", "rolled_back", updateUnknown:
	default:
		return v
	}
	switch st.State {
	case "online":
		v.CanUpdate = true
	case "pending":
		v.Blocked = "it has not connected yet, so its agent cannot be reached"
	default:
		v.Blocked = "it is offline, so its agent cannot be reached"
	}
	return v
}

// updateState derives the state: an update under way first, then an agent
// that cannot take one, then how the last update to the server's version
// ended while the machine is still not on it, else whether the reported
// bundle is the server's (unknown while nothing was reported).
func updateState(m store.Machine, server string) UpdateView {
	u := m.Update
	v := UpdateView{TargetVersion: u.Target, Error: u.Error}
	if !u.At.IsZero() {
		at := u.At
		v.At = &at
	}
	reportedOld := !m.Report.At.IsZero() && !m.Report.Can("update")
	switch {
	case u.State == "updating":
		v.State = "updating"
	case m.AgentOutdated || reportedOld || u.State == "unsupported" && m.Report.BundleVersion != server:
		v.State = "unsupported"
		if v.Error == "" {
			v.Error = "its agent predates fleet updates: run the join again on the machine"
		}
	case (u.State == "failed" || u.State == "rolled_back") && u.Target == server && m.Report.BundleVersion != server:
		v.State = u.State
	case server != "" && m.Report.BundleVersion == server:
		v.State = "current"
		v.Error = ""
	case m.Report.BundleVersion == "":
		v.State = updateUnknown
		v.TargetVersion = server
		v.Error = ""
	default:
		v.State = "outdated"
		v.TargetVersion = server
		v.Error = ""
	}
	return v
}

// ConfigView says whether a machine runs the client config it should.
type ConfigView struct {
	// State is "applied" or "pending".
	State             string `json:"state"`
	DesiredGeneration int64  `json:"desired_generation"`
	AppliedGeneration int64  `json:"applied_generation"`
	// PendingSince is when the machine fell behind (pending only).
	PendingSince *time.Time `json:"pending_since,omitempty"`
	// LastError is why the last delivery failed, in words (pending only).
	LastError string `json:"last_error,omitempty"`
	// Summary says it in one line: "config applied (generation N)" or
	// "pending since <time>: <last error>".
	Summary string `json:"summary"`
}

// ErrorAfter is how long a machine's config may stay undelivered, with
// deliveries failing, before its pending tunnels show "error".
const ErrorAfter = 2 * time.Minute

func configView(m store.Machine) ConfigView {
	c := m.Config
	v := ConfigView{DesiredGeneration: c.DesiredGen, AppliedGeneration: c.AppliedGen}
	if c.InStep() || c.DesiredHash == "" && c.DesiredGen == 0 {
		v.State = "applied"
		v.Summary = fmt.Sprintf("config applied (generation %d)", c.AppliedGen)
		if c.DesiredHash == "" {
			v.Summary = "config not checked yet"
		}
		return v
	}
	v.State = "pending"
	since := c.PendingSince
	if since.IsZero() {
		since = m.CreatedAt
	}
	v.PendingSince = &since
	if m.ConfigPush != nil && !m.ConfigPush.OK {
		v.LastError = m.ConfigPush.Message
	}
	why := v.LastError
	if why == "" {
		why = fmt.Sprintf("delivering generation %d", c.DesiredGen)
	}
	v.Summary = fmt.Sprintf("pending since %s: %s", since.UTC().Format("2006-01-02 15:04:05 UTC"), why)
	return v
}

// exposure is Exposure with the host filled in from the fallbacks.
func (s *Service) exposure(ctx context.Context, fallbackHost string) (Exposure, error) {
	var x Exposure
	var err error
	if s.Exposure != nil {
		if x, err = s.Exposure(ctx); err != nil {
			return x, err
		}
	}
	if s.BundleVersion != nil {
		x.BundleVersion, _ = s.BundleVersion()
	}
	x.Host, err = s.tunnelHost(ctx, fallbackHost)
	return x, err
}

// listensOutside reports whether tunnel listeners bind an address other
// than loopback.
func (x Exposure) listensOutside() bool {
	a, err := netip.ParseAddr(x.BindIP)
	return err == nil && !a.IsLoopback()
}

func toMachine(m store.Machine, x Exposure) Machine {
	st := StatusOf(m, x.TunnelServer)
	out := Machine{ID: m.ID, Name: m.Name, Username: m.Username, Status: st.State, CreatedAt: m.CreatedAt,
		ClientAddr: m.ClientAddr, TunnelPort: m.TunnelPort, AgentPort: m.AgentPort, AgentLocalPort: m.AgentLocalPort,
		ConfigPush: m.ConfigPush, AgentOutdated: m.AgentOutdated, SSHKeyID: m.SSHKeyID, StatusReason: st.Reason,
		Config: configView(m), AgentVersion: m.Report.AgentVersion, ClientVersion: m.Report.ClientVersion,
		BundleVersion: m.Report.BundleVersion, Update: updateView(m, x.BundleVersion, st), Edges: []EdgeView{},
		Transport: transportView(m)}
	if !m.LastSeen.IsZero() {
		seen := m.LastSeen
		out.LastSeen = &seen
	}
	out.SSHCommand, out.SSHDirect = sshCommand(m, x)
	return out
}

// OutdatedAgentHint is what a machine whose agent predates signed requests
// says, and what to do about it.
const OutdatedAgentHint = "its tunnel-agent is outdated (it takes the agent token itself instead of signed requests): " +
	"run bootstrap.sh on the machine again to get signed requests, the config allow-list and frpc as an unprivileged user"

// sshCommand is the command that reaches the machine's sshd through its SSH
// tunnel port on this server: directly when that port is reachable from
// outside, else through the VPS with ProxyJump (the port listens on the
// VPS's loopback).
func sshCommand(m store.Machine, x Exposure) (string, bool) {
	if x.listensOutside() && !x.FirewallSvc {
		return fmt.Sprintf("ssh -p %d %s@%s", m.TunnelPort, m.Username, x.Host), true
	}
	jump := x.Host
	if strings.Contains(jump, ":") {
		jump = "[" + jump + "]" // -J takes host[:port]: an IPv6 literal needs brackets
	}
	return fmt.Sprintf("ssh -J root@%s -p %d %s@127.0.0.1", jump, m.TunnelPort, m.Username), false
}

// Machines lists every machine; fallbackHost names this server in SSH
// commands when no server host is configured.
func (s *Service) Machines(ctx context.Context, fallbackHost string) ([]Machine, error) {
	x, err := s.exposure(ctx, fallbackHost)
	if err != nil {
		return nil, err
	}
	ms, err := s.Store.ListMachines(ctx)
	if err != nil {
		return nil, err
	}
	ev, err := s.edgeViews(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Machine, 0, len(ms))
	for _, m := range ms {
		v := toMachine(m, x)
		if e := ev[m.ID]; e != nil {
			v.Edges = e
		}
		out = append(out, v)
	}
	return out, nil
}

// ListFresh is how long List hands out a list it built, for as long as
// nothing was written: the edges' and machines' states that follow the
// clock (an edge whose heartbeat stopped is down after 30 s) are then at
// most this late.
const ListFresh = time.Second

// listCache is the last list List built, the state it was built for, and
// its generation (every new list, a new one).
type listCache struct {
	mu   sync.Mutex
	key  listKey
	at   time.Time
	gen  uint64
	list []Machine
}

// listKey is what a machine list depends on besides the clock: the
// database's state, the host the caller reached the dashboard by, and the
// machine bundle's version.
type listKey struct {
	changes      uint64
	host, bundle string
}

// List is Machines for the dashboard's polls, which read it again and
// again between changes: a list built less than ListFresh ago for the same
// database state, host and bundle version is handed out again, with the
// generation it was built under (the same generation, the same list). The
// caller must not change what it gets.
func (s *Service) List(ctx context.Context, fallbackHost string) ([]Machine, uint64, error) {
	key := listKey{changes: s.Store.Changes(), host: fallbackHost}
	if s.BundleVersion != nil {
		key.bundle, _ = s.BundleVersion()
	}
	now := s.now()
	c := &s.lists
	c.mu.Lock()
	if age := now.Sub(c.at); c.list != nil && c.key == key && age >= 0 && age < ListFresh {
		list, gen := c.list, c.gen
		c.mu.Unlock()
		return list, gen, nil
	}
	c.mu.Unlock()
	// Built under key: a write while it is built moves the database's
	// count, so the next call builds again.
	ms, err := s.Machines(ctx, fallbackHost)
	if err != nil {
		return nil, 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.key, c.at, c.list = key, now, ms
	return ms, c.gen, nil
}

// Machine returns one machine.
func (s *Service) Machine(ctx context.Context, id int64, fallbackHost string) (Machine, error) {
	m, err := s.Store.GetMachine(ctx, id)
	if err != nil {
		return Machine{}, err
	}
	x, err := s.exposure(ctx, fallbackHost)
	if err != nil {
		return Machine{}, err
	}
	ev, err := s.edgeViews(ctx)
	if err != nil {
		return Machine{}, err
	}
	v := toMachine(m, x)
	if e := ev[m.ID]; e != nil {
		v.Edges = e
	}
	if v.Serves, err = s.servedParts(ctx, m.ID); err != nil {
		return Machine{}, err
	}
	return v, nil
}

// ServedPart is a machine's part in a site served by several machines,
// beyond the tunnel's own port: which site, from which local port, and
// its state and health as the tunnel shows them.
type ServedPart struct {
	TunnelID   int64        `json:"tunnel_id"`
	TunnelName string       `json:"tunnel_name"`
	URL        string       `json:"url"`
	LocalPort  int          `json:"local_port"`
	RemotePort int          `json:"remote_port"`
	Status     string       `json:"status"`
	Health     TargetHealth `json:"health"`
}

// servedParts lists machine id's parts in sites served by several
// machines (the tunnels' targets on it).
func (s *Service) servedParts(ctx context.Context, id int64) ([]ServedPart, error) {
	ts, err := s.Store.ListTargets(ctx, id)
	if err != nil || len(ts) == 0 {
		return nil, err
	}
	c, err := s.tunnelContext(ctx, "")
	if err != nil {
		return nil, err
	}
	var out []ServedPart
	seen := map[int64]bool{}
	for _, tg := range ts {
		if seen[tg.TunnelID] {
			continue
		}
		seen[tg.TunnelID] = true
		t, err := s.Store.GetTunnel(ctx, tg.TunnelID)
		if err != nil {
			return nil, err
		}
		v := c.view(t)
		if len(v.Targets) < 2 {
			continue
		}
		url := ""
		if v.URL != nil {
			url = *v.URL
		}
		for _, p := range v.Targets[1:] {
			if p.MachineID == id {
				out = append(out, ServedPart{TunnelID: t.ID, TunnelName: t.Name, URL: url, LocalPort: p.LocalPort,
					RemotePort: p.RemotePort, Status: p.Status, Health: p.Health})
			}
		}
	}
	return out, nil
}

// RecordConfigPush stores the outcome of delivering the client config to
// the machine's agent; a failure shows on the machine until a push works.
func (s *Service) RecordConfigPush(ctx context.Context, id int64, pushErr error) error {
	p := store.ConfigPush{OK: pushErr == nil, At: s.now().UTC()}
	if pushErr != nil {
		p.Message = pushErr.Error()
	}
	return s.Store.SetConfigPush(ctx, id, p)
}

// Rename sets a machine's display name; ErrNameTaken when another machine
// has it.
func (s *Service) Rename(ctx context.Context, id int64, name, fallbackHost string) (Machine, error) {
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
	if old.Name != name {
		s.event(ctx, store.Event{Source: "machine", Kind: "renamed", MachineID: id, Message: fmt.Sprintf("machine %q renamed to %q", old.Name, name)})
	}
	return s.Machine(ctx, id, fallbackHost)
}

// Delete removes a machine with its tunnels, ports and credential. From the
// next plugin call on, frps refuses it everything: logins, pings, work and
// user connections.
func (s *Service) Delete(ctx context.Context, id int64) error {
	m, err := s.Store.GetMachine(ctx, id)
	if err != nil {
		return err
	}
	// The other machines serving its sites lose their part in them.
	var others []int64
	if ts, err := s.Store.ListTunnels(ctx, id); err == nil {
		for _, t := range ts {
			others = append(others, s.targetMachines(ctx, t.ID)...)
		}
	}
	if err := s.Store.DeleteMachine(ctx, id); err != nil {
		return err
	}
	s.event(ctx, store.Event{Source: "machine", Kind: "deleted", MachineID: id, Message: fmt.Sprintf("machine %q deleted", m.Name)})
	s.changed(id)
	for _, o := range others {
		s.changed(o)
	}
	return nil
}

// SelfDelete deletes the machine whose agent token this is and returns its
// name.
func (s *Service) SelfDelete(ctx context.Context, agentToken string) (string, error) {
	if agentToken == "" {
		return "", ErrInvalidToken
	}
	m, err := s.Store.MachineByAgentTokenHash(ctx, auth.HashToken(agentToken))
	if errors.Is(err, store.ErrNotFound) {
		return "", ErrInvalidToken
	}
	if err != nil {
		return "", err
	}
	return m.Name, s.Delete(ctx, m.ID)
}

// Tunnel is a tunnel as the API shows it (spec issue 6).
type Tunnel struct {
	ID          int64   `json:"id"`
	MachineID   int64   `json:"machine_id"`
	MachineName string  `json:"machine_name"`
	Name        string  `json:"name"`
	Kind        string  `json:"kind"`
	LocalPort   int     `json:"local_port"`
	Subdomain   *string `json:"subdomain"`
	Public      bool    `json:"public"`
	RemotePort  int     `json:"remote_port"`
	// Paused: closed until resumed (PATCH {"paused": false}).
	Paused bool `json:"paused"`
	// Status is active, pending, error, offline or paused; StatusReason
	// says why when it is not active.
	Status       string        `json:"status"`
	StatusReason string        `json:"status_reason,omitempty"`
	CreatedAt    time.Time     `json:"created_at"`
	URL          *string       `json:"url,omitempty"`
	Address      *string       `json:"address,omitempty"`
	Reachability *Reachability `json:"reachability,omitempty"`
	// Access, AllowIPs and HasPassword: the access gate (http tunnels only).
	Access      string   `json:"access,omitempty"`
	AllowIPs    []string `json:"allow_ips,omitempty"`
	HasPassword bool     `json:"has_password,omitempty"`
	SSOAllow    []string `json:"sso_allow,omitempty"`
	// Rules are the path rules before the gate, first match wins;
	// RememberDays how long a password or sso sign-in lasts (0: a day).
	Rules        []store.AccessRule `json:"rules,omitempty"`
	RememberDays int                `json:"remember_days,omitempty"`
	// Targets, Balance and Health (http tunnels only): the machines
	// serving the site, its own first (targets.go).
	Targets []TargetView `json:"targets,omitempty"`
	Balance string       `json:"balance,omitempty"`
	Health  *HealthView  `json:"health,omitempty"`
	// Domains are its own names besides <subdomain>.<domain> (domains.go).
	Domains []DomainView `json:"domains,omitempty"`
	// ProxyProtocol: the PROXY protocol header the service gets before
	// each connection, with the visitor's address ("" none, "v1", "v2").
	ProxyProtocol string `json:"proxy_protocol"`
	// Fallback is what the site answers while every machine serving it
	// is down (http tunnels; absent when not set).
	Fallback *FallbackView `json:"fallback,omitempty"`
}

// FallbackView is an http tunnel's fallback page.
type FallbackView struct {
	Message string `json:"message"`
}

// Reachability is an http tunnel's last probe through the web proxy.
type Reachability struct {
	State         string     `json:"state"` // up, down, unknown
	HTTPStatus    int        `json:"http_status"`
	Error         string     `json:"error"`
	CertIssuer    string     `json:"cert_issuer"`
	CertExpiresAt *time.Time `json:"cert_expires_at"`
	CertValid     bool       `json:"cert_valid"`
	// CertError says what is wrong with the certificate the proxy served,
	// in words ("" when nothing is): none served, not trusted, expired, or
	// past its renewal time (the proxy's renewals are failing).
	CertError string     `json:"cert_error"`
	CheckedAt *time.Time `json:"checked_at"`
}

// tunnelContext is what a tunnel's view needs besides its row.
type tunnelContext struct {
	x        Exposure
	machines map[int64]store.Machine
	probes   map[int64]store.TunnelProbe
	targets  map[int64][]store.Target // by tunnel
	domains  map[int64][]string       // by tunnel
	health   HealthResults
	now      time.Time
}

// newTunnelContext is what every tunnel's view needs besides the rows:
// how tunnels are reached, the health results and the time.
func (s *Service) newTunnelContext(ctx context.Context, fallbackHost string) (tunnelContext, error) {
	c := tunnelContext{machines: map[int64]store.Machine{}, targets: map[int64][]store.Target{},
		domains: map[int64][]string{}, probes: map[int64]store.TunnelProbe{}, health: s.Health, now: s.now()}
	if c.health == nil {
		c.health = noHealth{}
	}
	var err error
	c.x, err = s.exposure(ctx, fallbackHost)
	return c, err
}

// tunnelContext is the context of every tunnel (a list).
func (s *Service) tunnelContext(ctx context.Context, fallbackHost string) (tunnelContext, error) {
	c, err := s.newTunnelContext(ctx, fallbackHost)
	if err != nil {
		return c, err
	}
	ms, err := s.Store.ListMachines(ctx)
	if err != nil {
		return c, err
	}
	for _, m := range ms {
		c.machines[m.ID] = m
	}
	ts, err := s.Store.ListTargets(ctx, 0)
	if err != nil {
		return c, err
	}
	for _, t := range ts {
		c.targets[t.TunnelID] = append(c.targets[t.TunnelID], t)
	}
	if c.domains, err = s.Store.TunnelDomains(ctx); err != nil {
		return c, err
	}
	c.probes, err = s.Store.TunnelProbes(ctx)
	return c, err
}

// tunnelContextOf is the context of tunnel t alone: its machines, targets,
// domains and probe, without reading every machine and tunnel (what
// creating, changing or showing one tunnel needs, in a fleet of any size).
func (s *Service) tunnelContextOf(ctx context.Context, t store.Tunnel) (tunnelContext, error) {
	c, err := s.newTunnelContext(ctx, "")
	if err != nil {
		return c, err
	}
	if c.targets[t.ID], err = s.Store.TargetsOf(ctx, t.ID); err != nil {
		return c, err
	}
	ids := []int64{t.MachineID}
	for _, tg := range c.targets[t.ID] {
		ids = append(ids, tg.MachineID)
	}
	for _, id := range ids {
		if _, ok := c.machines[id]; ok {
			continue
		}
		m, err := s.Store.GetMachine(ctx, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return c, err
		}
		c.machines[id] = m
	}
	if c.domains[t.ID], err = s.Store.TunnelDomainsOf(ctx, t.ID); err != nil {
		return c, err
	}
	switch p, err := s.Store.TunnelProbe(ctx, t.ID); {
	case err == nil:
		c.probes[t.ID] = p
	case !errors.Is(err, store.ErrNotFound):
		return c, err
	}
	return c, nil
}

func (c tunnelContext) view(t store.Tunnel) Tunnel {
	m := c.machines[t.MachineID]
	out := Tunnel{ID: t.ID, MachineID: t.MachineID, MachineName: m.Name, Name: t.Name, Kind: t.Kind,
		LocalPort: t.LocalPort, Public: t.Public, RemotePort: t.RemotePort, CreatedAt: t.CreatedAt, Paused: t.Paused,
		ProxyProtocol: t.ProxyProtocol}
	out.Status, out.StatusReason = tunnelStatus(t, m, c.now)
	switch t.Kind {
	case "http":
		sub := t.Subdomain
		out.Subdomain = &sub
		u := ""
		if c.x.Domain != "" && sub != "" {
			u = "https://" + sub + "." + c.x.Domain
		}
		out.URL = &u
		r := Reachability{State: "unknown"}
		if p, ok := c.probes[t.ID]; ok {
			checked := p.CheckedAt
			r = Reachability{State: p.State, HTTPStatus: p.HTTPStatus, Error: p.Error, CertIssuer: p.CertIssuer,
				CertValid: p.CertValid, CertError: p.CertError, CheckedAt: &checked}
			if !p.CertExpiresAt.IsZero() {
				exp := p.CertExpiresAt
				r.CertExpiresAt = &exp
			}
		}
		out.Reachability = &r
		out.Balance = t.Balance
		if t.Health.Path != "" {
			out.Health = &HealthView{Path: t.Health.Path, IntervalS: t.Health.IntervalS, ExpectStatus: t.Health.ExpectStatus}
		}
		out.Targets = c.targetViews(t, out)
		if t.Fallback != "" {
			out.Fallback = &FallbackView{Message: t.Fallback}
		}
		out.Domains = c.domainViews(t)
	case "tcp", "udp":
		a := net.JoinHostPort(c.x.tcpHost(t), strconv.Itoa(t.RemotePort))
		out.Address = &a
	}
	return out
}

// tunnelStatus is what a tunnel's state is, and why:
//   - active: frps accepted its proxy (NewProxy through the plugin);
//   - pending: not yet, and the machine's config is on its way;
//   - error: deliveries of the machine's config have failed for more
//     than ErrorAfter;
//   - offline: its proxy closed (the machine disconnected);
//   - paused: the operator paused it; it stays closed until resumed.
func tunnelStatus(t store.Tunnel, m store.Machine, now time.Time) (string, string) {
	if t.Paused {
		return "paused", PausedReason
	}
	if t.Status == "online" {
		return "active", ""
	}
	c := m.Config
	failing := m.ConfigPush != nil && !m.ConfigPush.OK
	if !c.InStep() && failing && !c.PendingSince.IsZero() && now.Sub(c.PendingSince) > ErrorAfter {
		return "error", fmt.Sprintf("the config of %s has not been delivered for %s: %s", m.Name,
			now.Sub(c.PendingSince).Round(time.Second), m.ConfigPush.Message)
	}
	if t.Status == "offline" {
		return "offline", "its machine's tunnel client closed it (the machine disconnected)"
	}
	if !c.InStep() && c.DesiredHash != "" {
		why := fmt.Sprintf("waiting for %s to apply config generation %d", m.Name, c.DesiredGen)
		if failing {
			why += ": " + m.ConfigPush.Message
		}
		return "pending", why
	}
	if failing {
		return "pending", "the config of " + m.Name + " cannot be rendered: " + m.ConfigPush.Message
	}
	return "pending", "waiting for the tunnel server to accept it from " + m.Name
}

// PausedReason is a paused tunnel's status_reason.
const PausedReason = "paused: closed on the tunnel server and the web proxy until it is resumed"

// tcpHost is where a tcp or udp tunnel's port is reached: this server's public
// name when the tunnel is public and listeners bind outside loopback, else
// the VPS's loopback (reach it over SSH).
func (x Exposure) tcpHost(t store.Tunnel) string {
	if t.Public && x.listensOutside() {
		if x.Host != "" {
			return x.Host
		}
		return x.BindIP
	}
	return "127.0.0.1"
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
	// Paused closes the tunnel without deleting it (true) or opens it
	// again (false).
	Paused *bool `json:"paused"`
	// The access gate of an http tunnel (see access.go).
	Access   *string   `json:"access"`
	Password *string   `json:"password"`
	AllowIPs *[]string `json:"allow_ips"`
	// SSOAllow: who may enter in access "sso" (emails, @domains,
	// group:names).
	SSOAllow *[]string `json:"sso_allow"`
	// Rules: path rules before the gate ({path, action}, first match
	// wins); RememberDays: a sign-in lasts this many days (password and
	// sso access).
	Rules        *[]store.AccessRule `json:"rules"`
	RememberDays *int                `json:"remember_days"`
	// Several machines serving an http tunnel (targets.go).
	Targets *[]TargetInput `json:"targets"`
	// Domains are an http tunnel's own names (domains.go).
	Domains *[]string    `json:"domains"`
	Balance *string      `json:"balance"`
	Health  *HealthInput `json:"health"`
	// ProxyProtocol: "" (off), "v1" or "v2" (udp: "v2" only).
	ProxyProtocol *string `json:"proxy_protocol"`
	// Fallback: the message of the 503 page while every machine is down
	// ({"message": ""} removes it; http tunnels).
	Fallback *FallbackView `json:"fallback"`
}

// Tunnels lists tunnels, of one machine when machineID is not 0.
func (s *Service) Tunnels(ctx context.Context, machineID int64) ([]Tunnel, error) {
	ts, err := s.Store.ListTunnels(ctx, machineID)
	if err != nil {
		return nil, err
	}
	c, err := s.tunnelContext(ctx, "")
	if err != nil {
		return nil, err
	}
	out := make([]Tunnel, 0, len(ts))
	for _, t := range ts {
		out = append(out, c.view(t))
	}
	return out, s.showAccess(ctx, out)
}

// Tunnel returns one tunnel.
func (s *Service) Tunnel(ctx context.Context, id int64) (Tunnel, error) {
	t, err := s.Store.GetTunnel(ctx, id)
	if err != nil {
		return Tunnel{}, err
	}
	c, err := s.tunnelContextOf(ctx, t)
	if err != nil {
		return Tunnel{}, err
	}
	out := c.view(t)
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
			return InputError("public is only for tcp and udp tunnels")
		}
	case "tcp", "udp":
		if t.Subdomain != "" {
			return InputError("subdomain is only for http tunnels")
		}
	case "":
		return InputError("kind is required")
	default:
		return InputError(`kind must be "http", "tcp" or "udp"`)
	}
	if t.LocalPort < 1 || t.LocalPort > 65535 {
		return InputError("local_port must be between 1 and 65535")
	}
	if err := checkProxyProtocol(t.Kind, t.ProxyProtocol); err != nil {
		return err
	}
	return checkFallback(t)
}

// checkFallback: an http tunnel's fallback message is text, lines
// included, of at most MaxFallbackChars characters.
func checkFallback(t store.Tunnel) error {
	if t.Fallback == "" {
		return nil
	}
	if t.Kind != "http" {
		return InputError("fallback is only for http tunnels")
	}
	if !utf8.ValidString(t.Fallback) || utf8.RuneCountInString(t.Fallback) > webproxy.MaxFallbackChars {
		return InputError(fmt.Sprintf("fallback.message must be text of at most %d characters", webproxy.MaxFallbackChars))
	}
	for _, r := range t.Fallback {
		if r < 0x20 && r != '\n' || r == 0x7f {
			return InputError("fallback.message may hold letters, punctuation and line breaks, not control characters")
		}
	}
	return nil
}

// checkProxyProtocol: "" (off), "v1" or "v2"; a udp tunnel's datagrams can
// carry only v2 (v1 is a line of text for a TCP stream).
func checkProxyProtocol(kind, v string) error {
	switch v {
	case "", "v2":
		return nil
	case "v1":
		if kind == "udp" {
			return InputError(`proxy_protocol "v1" cannot carry udp datagrams: use "v2", or "" for none`)
		}
		return nil
	}
	return InputError(`proxy_protocol must be "" (none), "v1" or "v2"`)
}

// checkLabel: a hostname label (spec §4.2 note 3), lower-cased by the caller.
func checkLabel(field, v string) error {
	if v == "" {
		return InputError(field + " is required")
	}
	if len(v) > validate.MaxLabel {
		return InputError(field + " must be at most 63 characters")
	}
	if validate.Label(v) != nil || strings.ToLower(v) != v {
		return InputError(field + " must be a hostname label: lowercase letters, digits and inner hyphens")
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

// tunnelWrite is one tunnel change, checked and ready for the store, with
// what to tell once it is stored.
type tunnelWrite struct {
	store.TunnelWrite
	in TunnelInput
	// before: the machines serving the tunnel before the change.
	before    []int64
	wasPaused bool
	// freed says which domains other writes of its batch give up.
	freed func(owner int64, domain string) bool
}

// CreateTunnel validates and stores a tunnel with a newly allocated remote
// port. frps is not touched: the plugin accepts the new proxy as soon as
// the machine's frpc asks for it.
func (s *Service) CreateTunnel(ctx context.Context, in TunnelInput) (Tunnel, error) {
	w, err := s.planCreate(ctx, in, nil)
	if err != nil {
		return Tunnel{}, err
	}
	// One transaction: the tunnel with its gate, domains and targets,
	// whole or not at all (never public for a moment when asked for with
	// a gate, never seen half made by another edge).
	created, err := s.Store.InsertTunnelParts(ctx, w.Tunnel, w.Access, w.Domains, w.Targets, s.Ports, s.now())
	if err != nil {
		return Tunnel{}, writeError(err, w.Tunnel)
	}
	s.told(ctx, w, created)
	return s.Tunnel(ctx, created.ID)
}

// writeError is a store's refusal of a tunnel write in the API's words.
func writeError(err error, t store.Tunnel) error {
	var dt *store.DomainTakenError
	switch {
	case errors.Is(err, store.ErrNotFound) && t.ID == 0:
		return InputError(fmt.Sprintf("machine %d does not exist", t.MachineID))
	case errors.As(err, &dt):
		return domainTaken(err)
	}
	return targetsError(domainTaken(err))
}

// planCreate checks in as a new tunnel; freed (nil: none) names the
// domains its batch gives up.
func (s *Service) planCreate(ctx context.Context, in TunnelInput, freed func(int64, string) bool) (tunnelWrite, error) {
	// With targets, the first is the tunnel's own machine and port.
	if in.Targets != nil && len(*in.Targets) > 0 {
		first := (*in.Targets)[0]
		if in.MachineID == nil {
			in.MachineID = &first.MachineID
		}
		if in.LocalPort == nil {
			in.LocalPort = &first.LocalPort
		}
	}
	if in.MachineID == nil {
		return tunnelWrite{}, InputError("machine_id is required")
	}
	if in.LocalPort == nil {
		return tunnelWrite{}, InputError("local_port is required")
	}
	t := store.Tunnel{MachineID: *in.MachineID, Name: lower(in.Name), Kind: deref(in.Kind), Subdomain: lower(in.Subdomain), LocalPort: *in.LocalPort}
	mergeFlags(&t, in)
	if err := validateTunnel(t); err != nil {
		return tunnelWrite{}, err
	}
	w := tunnelWrite{TunnelWrite: store.TunnelWrite{Kind: store.WriteCreate}, in: in, freed: freed}
	if in.Targets != nil || in.Balance != nil || in.Health != nil {
		ms, err := s.machineMap(ctx)
		if err != nil {
			return w, err
		}
		if _, ok := ms[t.MachineID]; !ok {
			return w, InputError(fmt.Sprintf("machine %d does not exist", t.MachineID))
		}
		if w.Targets, err = planTargets(&t, in, ms); err != nil {
			return w, err
		}
	}
	return w, s.planParts(ctx, &w, t, store.TunnelAccess{Access: "public"})
}

// mergeFlags puts in's public, paused, proxy_protocol and fallback on t.
func mergeFlags(t *store.Tunnel, in TunnelInput) {
	if in.Public != nil {
		t.Public = *in.Public
	}
	if in.Paused != nil {
		t.Paused = *in.Paused
	}
	if in.ProxyProtocol != nil {
		t.ProxyProtocol = *in.ProxyProtocol
	}
	if in.Fallback != nil {
		t.Fallback = in.Fallback.Message
	}
}

// planParts checks the domains and the gate of w, whose tunnel is t (its
// other fields merged) and whose gate is cur now.
func (s *Service) planParts(ctx context.Context, w *tunnelWrite, t store.Tunnel, cur store.TunnelAccess) error {
	domains, err := s.planDomains(ctx, t, w.in, w.freed)
	if err != nil {
		return err
	}
	access, err := planAccess(t, cur, w.in)
	if err != nil {
		return err
	}
	if err := access.hash(ctx); err != nil {
		return err
	}
	w.Tunnel, w.Domains = t, domains
	if access.changed {
		w.Access = &access.next
	}
	return nil
}

// told records a stored write's event and tells the machines that serve
// the tunnel, before and after, that their configs changed.
func (s *Service) told(ctx context.Context, w tunnelWrite, created store.Tunnel) {
	t := w.Tunnel
	switch w.Kind {
	case store.WriteCreate:
		t = created
		s.event(ctx, store.Event{Source: "tunnel", Kind: "created", MachineID: t.MachineID, TunnelID: t.ID,
			Message: fmt.Sprintf("%s tunnel %q created: local port %d, remote port %d", t.Kind, t.Name, t.LocalPort, t.RemotePort)})
	case store.WriteDelete:
		s.event(ctx, store.Event{Source: "tunnel", Kind: "deleted", MachineID: t.MachineID, TunnelID: t.ID,
			Message: fmt.Sprintf("tunnel %q deleted", t.Name)})
	case store.WriteUpdate:
		s.updated(ctx, w)
	}
	ids := w.before
	if w.Kind != store.WriteDelete {
		ids = append(ids, s.targetMachines(ctx, t.ID)...)
	}
	for _, id := range ids {
		s.changed(id)
	}
	s.changed(t.MachineID)
}

// updated records an update's events: paused, resumed, updated.
func (s *Service) updated(ctx context.Context, w tunnelWrite) {
	t := w.Tunnel
	switch {
	case t.Paused && !w.wasPaused:
		s.event(ctx, store.Event{Source: "tunnel", Kind: "paused", MachineID: t.MachineID, TunnelID: t.ID,
			Message: fmt.Sprintf("tunnel %q paused", t.Name)})
	case !t.Paused && w.wasPaused:
		s.event(ctx, store.Event{Source: "tunnel", Kind: "resumed", MachineID: t.MachineID, TunnelID: t.ID,
			Message: fmt.Sprintf("tunnel %q resumed", t.Name)})
	}
	if !onlyPause(w.in) {
		s.event(ctx, store.Event{Source: "tunnel", Kind: "updated", MachineID: t.MachineID, TunnelID: t.ID,
			Message: fmt.Sprintf("tunnel %q updated", t.Name)})
	}
}

// UpdateTunnel changes name, local_port, subdomain, public, paused or the
// access gate. kind and machine_id are fixed at creation.
func (s *Service) UpdateTunnel(ctx context.Context, id int64, in TunnelInput) (Tunnel, error) {
	w, err := s.planUpdate(ctx, id, in, nil)
	if err != nil {
		return Tunnel{}, err
	}
	// One transaction: the tunnel, its access, domains and targets commit
	// whole, and other edges hear of them together.
	if err := s.Store.UpdateTunnelParts(ctx, w.Tunnel, w.Access, w.Targets, w.Domains, s.Ports); err != nil {
		return Tunnel{}, writeError(err, w.Tunnel)
	}
	s.told(ctx, w, store.Tunnel{})
	return s.Tunnel(ctx, id)
}

// planUpdate checks in as a change of tunnel id; freed as planCreate's.
func (s *Service) planUpdate(ctx context.Context, id int64, in TunnelInput, freed func(int64, string) bool) (tunnelWrite, error) {
	t, err := s.Store.GetTunnel(ctx, id)
	if err != nil {
		return tunnelWrite{}, err
	}
	w := tunnelWrite{TunnelWrite: store.TunnelWrite{Kind: store.WriteUpdate}, in: in, wasPaused: t.Paused, freed: freed}
	if in.Kind != nil && *in.Kind != t.Kind {
		return w, InputError("kind cannot be changed; delete the tunnel and create another")
	}
	if in.MachineID != nil && *in.MachineID != t.MachineID {
		return w, InputError("machine_id cannot be changed")
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
	mergeFlags(&t, in)
	if err := validateTunnel(t); err != nil {
		return w, err
	}
	if in.Targets != nil || in.Balance != nil || in.Health != nil {
		ms, err := s.machineMap(ctx)
		if err != nil {
			return w, err
		}
		if w.Targets, err = planTargets(&t, in, ms); err != nil {
			return w, err
		}
	}
	w.before = s.targetMachines(ctx, t.ID)
	cur, err := s.currentAccess(ctx, t.ID)
	if err != nil {
		return w, err
	}
	return w, s.planParts(ctx, &w, t, cur)
}

// onlyPause reports whether in changes nothing but paused.
func onlyPause(in TunnelInput) bool {
	return in.Paused != nil && in.MachineID == nil && in.Name == nil && in.Kind == nil && in.LocalPort == nil &&
		in.Subdomain == nil && in.Public == nil && in.Access == nil && in.Password == nil && in.AllowIPs == nil &&
		in.SSOAllow == nil && in.Targets == nil && in.Balance == nil && in.Health == nil && in.Domains == nil &&
		in.ProxyProtocol == nil && in.Rules == nil && in.RememberDays == nil && in.Fallback == nil
}

// DeleteTunnel removes a tunnel and frees its port; the plugin refuses its
// connections from then on.
func (s *Service) DeleteTunnel(ctx context.Context, id int64) error {
	w, err := s.planDelete(ctx, id)
	if err != nil {
		return err
	}
	if err := s.Store.DeleteTunnel(ctx, id); err != nil {
		return err
	}
	s.told(ctx, w, store.Tunnel{})
	return nil
}

// planDelete is the removal of tunnel id.
func (s *Service) planDelete(ctx context.Context, id int64) (tunnelWrite, error) {
	t, err := s.Store.GetTunnel(ctx, id)
	if err != nil {
		return tunnelWrite{}, err
	}
	return tunnelWrite{TunnelWrite: store.TunnelWrite{Kind: store.WriteDelete, Tunnel: t}, before: s.targetMachines(ctx, id)}, nil
}

// MachineActivity is one machine's newest events (its tunnels' included),
// at most twice ActivityPerSource; ErrNotFound for an unknown machine.
func (s *Service) MachineActivity(ctx context.Context, id int64) ([]store.Event, error) {
	if _, err := s.Store.GetMachine(ctx, id); err != nil {
		return nil, err
	}
	return s.Store.MachineEvents(ctx, id, 2*ActivityPerSource)
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

// RejoinRequest is POST /api/machines/rejoin's input: the machine's agent
// token and who sent it.
type RejoinRequest struct {
	AgentToken string
	Client     netip.Addr
	// FallbackHost names the tunnel server when nothing configured does.
	FallbackHost string
}

// Rejoined is POST /api/machines/rejoin's answer: a registration of the
// same machine, with a fresh credential.
type Rejoined struct {
	Registration
	MachineID int64  `json:"machine_id"`
	Name      string `json:"name"`
	Username  string `json:"-"`
	Rejoined  bool   `json:"rejoined"`
	// ClientAddr and SSHKeyID are where the machine joined from and the VPS
	// key it was given, Old* before this rejoin ("" unknown).
	ClientAddr, OldClientAddr string `json:"-"`
	SSHKeyID, OldSSHKeyID     string `json:"-"`
}

// Rejoin gives the machine whose agent token this is a fresh credential
// (frp secret and agent token; the old ones stop working) and the client
// config for it, tunnels included. The machine keeps its id, name, user,
// ports and tunnels. Its config delivery starts over: Desire records the
// new config as desired, pending until the machine's (new) agent reports
// it applied. ErrInvalidToken for a token no
// machine holds; unknown tokens count against the address like bad
// bootstrap tokens.
func (s *Service) Rejoin(ctx context.Context, req RejoinRequest) (Rejoined, error) {
	if ok, wait := s.Limiter.Check(req.Client); !ok {
		s.stale(ctx, req.Client, "rejoin rate limited")
		return Rejoined{}, &auth.RateLimitedError{RetryAfter: wait}
	}
	fail := func(reason string) (Rejoined, error) {
		s.stale(ctx, req.Client, reason)
		s.Limiter.Fail(req.Client)
		return Rejoined{}, ErrInvalidToken
	}
	if req.AgentToken == "" {
		return fail("rejoin without an agent token")
	}
	oldHash := auth.HashToken(req.AgentToken)
	m, err := s.Store.MachineByAgentTokenHash(ctx, oldHash)
	if errors.Is(err, store.ErrNotFound) {
		return fail("rejoin with an unknown agent token")
	}
	if err != nil {
		return Rejoined{}, err
	}
	r, err := s.renderer(ctx, m.ID, req.FallbackHost)
	if err != nil {
		return Rejoined{}, err
	}
	target, err := r.dial(m)
	if err != nil {
		return Rejoined{}, err
	}
	host := target.Host
	var vpsKey, keyID string
	if ki, ok := s.Keys.(KeyIdentifier); ok {
		keyID, vpsKey, err = ki.DefaultKey(ctx)
	} else {
		vpsKey, err = s.Keys.DefaultPublicKey(ctx)
	}
	if err != nil {
		return Rejoined{}, fmt.Errorf("read the VPS SSH public key: %w", err)
	}
	secret, err := auth.NewToken()
	if err != nil {
		return Rejoined{}, err
	}
	agentToken := deriveAgentToken(secret)
	cfg, _, err := r.config(ctx, m, secret)
	if err != nil {
		return Rejoined{}, err
	}
	err = s.Store.RotateCredential(ctx, m.ID, oldHash, store.Credential{
		SecretHash: auth.HashToken(secret), SecretSealed: s.Sealer.Seal([]byte(secret), secretAAD(m.ID)),
		AgentTokenHash: auth.HashToken(agentToken), ClientAddr: addrString(req.Client), SSHKeyID: keyID,
	})
	if errors.Is(err, store.ErrNotFound) {
		// Deleted, or rejoined by another request, since it was read.
		return fail("rejoin with an agent token replaced meanwhile")
	}
	if err != nil {
		return Rejoined{}, err
	}
	// The clients for the other edges carry the new credential too.
	if err := s.Desire(ctx, m.ID); err != nil {
		return Rejoined{}, err
	}
	s.event(ctx, store.Event{Source: "machine", Kind: "rejoined", MachineID: m.ID,
		Message: fmt.Sprintf("machine %q rejoined from %s with a fresh credential; it keeps tunnel port %d and %d tunnel(s)", m.Name, addrString(req.Client), m.TunnelPort, len(r.tunnels[m.ID]))})
	return Rejoined{
		Registration: Registration{MachineID: m.ID, TunnelPort: m.TunnelPort, VPSKey: vpsKey, ClientConfig: cfg,
			AgentToken: agentToken, AgentLocalPort: m.AgentLocalPort,
			Transport: transportOf(m), TunnelServer: s.tunnelServer(host)},
		MachineID: m.ID, Name: m.Name, Username: m.Username, Rejoined: true,
		ClientAddr: addrString(req.Client), OldClientAddr: m.ClientAddr, SSHKeyID: keyID, OldSSHKeyID: m.SSHKeyID,
	}, nil
}

// RejoinCommand is the one line to run on a machine already joined to the
// server at base (a join base URL) to run the join again, keeping the
// machine's id, name, ports and tunnels: bootstrap.sh --rejoin, which
// takes the machine's credential from /etc/revtunnel/machine.env.
func RejoinCommand(base string) string {
	return "curl -fsSL " + shellescape.Quote(strings.TrimSuffix(base, "/")+"/static/bootstrap.sh") + " | sudo bash -s -- --rejoin"
}

// RejoinOverSSH wraps line in the machine's SSH command (sshCommand, as
// Machine.SSHCommand), so it runs on the machine from anywhere that SSH
// command works. -t gives sudo a terminal to ask a password on.
func RejoinOverSSH(sshCommand, line string) string {
	cmd, ok := strings.CutPrefix(sshCommand, "ssh ")
	if !ok {
		return ""
	}
	return "ssh -t " + cmd + " " + shellescape.Quote(line)
}
