package revtunnel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Activity event kinds the plugin records.
const (
	EventConnected     = "connected"
	EventDisconnected  = "disconnected"
	EventLoginRefused  = "login_refused"
	EventProxyRefused  = "proxy_refused"
	EventTunnelUp      = "tunnel_up"
	EventTunnelDown    = "tunnel_down"
	pluginBodyLimit    = 1 << 20
	pluginStoreTimeout = 5 * time.Second
)

// Plugin answers frps's HTTP server-plugin calls (frp doc/server_plugin.md).
// Every call is checked against the database as it is now, so a deleted
// machine or tunnel is refused from its next call on, and adding a tunnel
// needs no frps restart.
type Plugin struct {
	Store *store.Store
	Log   *slog.Logger
	Now   func() time.Time
	// OnLogin, when set, hears of every accepted Login with the tunnel CA
	// the machine's config carries (frpconf.MetaCA; "" for configs that
	// predate it). It must not block.
	OnLogin func(ctx context.Context, machineID int64, caPEM string)
	// OnPing, when set, hears of every accepted Ping (every
	// frpconf.HeartbeatInterval seconds per machine); it must not block.
	OnPing func(machineID int64)
	// Edge, when set, names the edge this frps runs on (id 0 while its row
	// is not known yet): a machine's status is then recorded per edge, and
	// it is online while one edge that is up has it.
	Edge func() (id int64, name string)
	// OnProxy, when set, hears of every tunnel or target proxy frps opens
	// or closes, by the tunnel it serves: the health checks look at that
	// site at once instead of at their next turn. It must not block.
	OnProxy func(tunnelID int64)
	// Bridge, when set, is the wss bridge: a Login from one of its
	// connections is a machine on the wss transport, from the address the
	// bridge knows (frps reports the bridge's own).
	Bridge *Bridge

	// conns remembers the user connections NewUserConn let through.
	conns store.Memo[userConnKey, struct{}]
	// known and tunnels remember the machines (by secret hash) and the
	// tunnels (by id) looked up: read again after any commit, and what
	// stands in while the database cannot be reached, so that machines
	// already known keep their tunnels and connections (store.Memo).
	known   store.Memo[string, store.Machine]
	tunnels store.Memo[int64, store.Tunnel]
	targets store.Memo[int64, store.Target]

	// seenMu guards seenAt: when each machine was seen since the last
	// flush (see touch, FlushSeen), and sessions: the run id of each machine's
	// latest login to this edge's frps (see staleSession).
	seenMu   sync.Mutex
	seenAt   map[int64]time.Time
	sessions map[int64]string
}

// session records run as machine id's current session on this edge.
func (p *Plugin) session(id int64, run string) {
	if run == "" {
		return
	}
	p.seenMu.Lock()
	defer p.seenMu.Unlock()
	if p.sessions == nil {
		p.sessions = map[int64]string{}
	}
	p.sessions[id] = run
}

// staleSession says whether run is a session of machine id that a later
// login replaced. frps tells of a session's end (its proxies closing)
// when it notices, which may be after the machine's restarted client
// logged in again: that news is about a session already gone, and must
// not mark the machine or its tunnels down.
func (p *Plugin) staleSession(id int64, run string) bool {
	p.seenMu.Lock()
	defer p.seenMu.Unlock()
	cur, ok := p.sessions[id]
	return ok && run != "" && run != cur
}

// SeenEvery is how often the machines' Pings are written as their
// last_seen, all in one commit (FlushSeen). Every commit empties the
// caches (conns, the settings, the machines' snapshot). A login, a proxy
// closing and a status change still write at once.
const SeenEvery = 30 * time.Second

// touch notes that machine id was seen at now; FlushSeen writes it.
func (p *Plugin) touch(id int64, now time.Time) {
	p.seenMu.Lock()
	defer p.seenMu.Unlock()
	p.touchLocked(id, now)
}

// FlushSeen writes every machine's last_seen noted since the last flush,
// in one transaction. Each commit empties the caches (the known machines,
// the connections let through, the settings), and a Ping is made every
// 10 s by each machine: written as they came, 10,000 machines made a
// commit every 3 ms. A failed write is tried again at the next flush.
func (p *Plugin) FlushSeen(ctx context.Context) error {
	p.seenMu.Lock()
	seen := p.seenAt
	p.seenAt = nil
	p.seenMu.Unlock()
	if len(seen) == 0 {
		return nil
	}
	err := p.Store.TouchMachines(ctx, seen, p.edgeID())
	if err != nil {
		p.seenMu.Lock()
		for id, at := range seen {
			p.touchLocked(id, at)
		}
		p.seenMu.Unlock()
	}
	return err
}

func (p *Plugin) touchLocked(id int64, at time.Time) {
	if p.seenAt == nil {
		p.seenAt = map[int64]time.Time{}
	}
	if last, ok := p.seenAt[id]; !ok || at.After(last) {
		p.seenAt[id] = at
	}
}

// RunSeen flushes the machines' last_seen every SeenEvery until ctx ends,
// and once more then.
func (p *Plugin) RunSeen(ctx context.Context) error {
	t := time.NewTicker(SeenEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			p.FlushSeen(fctx)
			cancel()
			return nil
		case <-t.C:
		}
		if err := p.FlushSeen(ctx); err != nil && !store.Unavailable(err) {
			p.log().Warn("could not record when machines were last seen; tried again at the next flush", "err", err)
		}
	}
}

func (p *Plugin) edgeID() int64 {
	if p.Edge == nil {
		return 0
	}
	id, _ := p.Edge()
	return id
}

// setStatus records a machine's status as this edge sees it (or, with no
// edge known, as the machine's own).
func (p *Plugin) setStatus(ctx context.Context, id int64, status string, now time.Time) error {
	if e := p.edgeID(); e != 0 {
		return p.Store.SetMachineEdgeStatus(ctx, id, e, status, now)
	}
	return p.Store.SetMachineStatus(ctx, id, status, now)
}

// userConnKey is what Plugin.conns remembers NewUserConn accepting, for
// as long as nothing is committed to the database. frps asks for every
// connection to a tunnel port, and the two lookups cost ~0.1 ms of the
// daemon's time each time; a burst of new connections (a web proxy
// opening connections to an HTTP tunnel) queued behind them. Any commit,
// by this process or another (store.Changes), empties it, so deleting a
// machine or a tunnel still refuses the very next connection.
type userConnKey struct{ secretHash, user, proxy string }

type pluginRequest struct {
	Version string          `json:"version"`
	Op      string          `json:"op"`
	Content json.RawMessage `json:"content"`
}

type pluginResponse struct {
	Reject       bool   `json:"reject"`
	RejectReason string `json:"reject_reason,omitempty"`
	Unchange     bool   `json:"unchange"`
}

type userInfo struct {
	User  string            `json:"user"`
	Metas map[string]string `json:"metas"`
	RunID string            `json:"run_id"`
}

type loginContent struct {
	User          string            `json:"user"`
	Metas         map[string]string `json:"metas"`
	RunID         string            `json:"run_id"`
	ClientAddress string            `json:"client_address"`
}

type proxyContent struct {
	User       userInfo `json:"user"`
	ProxyName  string   `json:"proxy_name"`
	ProxyType  string   `json:"proxy_type"`
	RemotePort int      `json:"remote_port"`
	RemoteAddr string   `json:"remote_addr"`
}

// refusal is a reason to reject, shown to frpc and recorded.
type refusal string

func (r refusal) Error() string { return string(r) }

// ServeHTTP answers one plugin call. Only loopback peers are served: the
// listener is on 127.0.0.1, and this check keeps it so if it is ever mounted
// elsewhere.
func (p *Plugin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err != nil || !ap.Addr().Unmap().IsLoopback() {
		http.Error(w, "plugin calls are accepted from loopback only", http.StatusForbidden)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != frpconf.PluginPath {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var req pluginRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, pluginBodyLimit)).Decode(&req); err != nil {
		http.Error(w, "invalid plugin request", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pluginStoreTimeout)
	defer cancel()
	err := p.handle(ctx, req)
	var ref refusal
	switch {
	case err == nil:
		writeJSON(w, pluginResponse{Unchange: true})
	case errors.As(err, &ref):
		writeJSON(w, pluginResponse{Reject: true, RejectReason: string(ref)})
	default:
		// A failing database must not let anyone in: non-200 makes frps fail the operation.
		p.log().Error("frp plugin call failed", "op", req.Op, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (p *Plugin) log() *slog.Logger {
	if p.Log == nil {
		return slog.Default()
	}
	return p.Log
}

func (p *Plugin) now() time.Time {
	if p.Now == nil {
		return time.Now()
	}
	return p.Now()
}

func (p *Plugin) handle(ctx context.Context, req pluginRequest) error {
	switch req.Op {
	case "Login":
		var c loginContent
		if err := json.Unmarshal(req.Content, &c); err != nil {
			return refusal("malformed Login content")
		}
		return p.login(ctx, c)
	case "NewProxy", "CloseProxy", "NewUserConn":
		var c proxyContent
		if err := json.Unmarshal(req.Content, &c); err != nil {
			return refusal("malformed " + req.Op + " content")
		}
		switch req.Op {
		case "NewProxy":
			return p.newProxy(ctx, c)
		case "CloseProxy":
			return p.closeProxy(ctx, c)
		}
		return p.newUserConn(ctx, c)
	case "Ping", "NewWorkConn":
		var c struct {
			User userInfo `json:"user"`
		}
		if err := json.Unmarshal(req.Content, &c); err != nil {
			return refusal("malformed " + req.Op + " content")
		}
		m, err := p.machine(ctx, c.User.User, c.User.Metas)
		if err != nil {
			return err
		}
		if req.Op == "Ping" {
			if p.OnPing != nil {
				p.OnPing(m.ID)
			}
			p.touch(m.ID, p.now())
		}
		return nil
	}
	return refusal("unsupported operation " + req.Op)
}

// machine authenticates a frp user by the secret in its metadata: the secret
// must belong to a live machine whose frp user name is the one presented.
func (p *Plugin) machine(ctx context.Context, user string, metas map[string]string) (store.Machine, error) {
	secret := metas[frpconf.MetaToken]
	if secret == "" {
		return store.Machine{}, refusal("no machine credential")
	}
	h := auth.HashToken(secret)
	m, err := p.known.Get(p.Store, h, func() (store.Machine, error) { return p.Store.MachineBySecretHash(ctx, h) })
	if errors.Is(err, store.ErrNotFound) {
		return m, refusal("unknown or deleted machine credential")
	}
	if err != nil {
		return m, err
	}
	if frpconf.User(m.ID) != user {
		return m, refusal(fmt.Sprintf("credential of machine %d presented as user %q", m.ID, user))
	}
	return m, nil
}

func (p *Plugin) event(ctx context.Context, e store.Event) {
	e.CreatedAt = p.now()
	if p.Edge != nil {
		_, e.Edge = p.Edge()
	}
	if err := p.Store.InsertEvent(context.WithoutCancel(ctx), e); err != nil {
		p.log().Error("activity event write failed", "kind", e.Kind, "err", err)
	}
}

// claimedMachine is the machine id a frp user name claims to be, or 0.
func claimedMachine(user string) int64 {
	id, err := strconv.ParseInt(strings.TrimPrefix(user, "m"), 10, 64)
	if err != nil || !strings.HasPrefix(user, "m") {
		return 0
	}
	return id
}

// via is how a Login reached frps: its transport and the machine's
// address (host only).
func (p *Plugin) via(clientAddress string) (transport, addr string) {
	if a, ok := p.Bridge.Via(clientAddress); ok {
		return frpconf.TransportWSS, a
	}
	addr = clientAddress
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	return frpconf.TransportTCP, addr
}

func (p *Plugin) login(ctx context.Context, c loginContent) error {
	transport, addr := p.via(c.ClientAddress)
	if transport == frpconf.TransportWSS {
		// What the log, the events and the stale-attempt list name.
		c.ClientAddress = addr + " (over wss)"
	}
	m, err := p.machine(ctx, c.User, c.Metas)
	var ref refusal
	if errors.As(err, &ref) {
		p.log().Warn("frp login refused", "user", c.User, "client", c.ClientAddress, "reason", string(ref))
		p.event(ctx, store.Event{Source: "machine", Kind: EventLoginRefused, MachineID: claimedMachine(c.User),
			Message: fmt.Sprintf("tunnel login as %q from %s refused: %s", c.User, c.ClientAddress, ref)})
		if werr := p.Store.InsertStaleTokenAttempt(context.WithoutCancel(ctx), store.StaleTokenAttempt{
			Kind: store.StaleTunnelCredential, CreatedAt: p.now(), ClientAddr: addr,
			Reason: fmt.Sprintf("tunnel login as %q refused: %s", c.User, ref),
		}); werr != nil {
			p.log().Error("stale-token attempt write failed", "err", werr)
		}
		return err
	}
	if err != nil {
		return err
	}
	p.session(m.ID, c.RunID)
	if err := p.setStatus(ctx, m.ID, "online", p.now()); err != nil {
		if !store.Unavailable(err) {
			return err
		}
		// A known machine logs in from memory while the database is gone;
		// its status is written at its next login or proxy change.
		p.log().Warn("machine logged in while the database is unavailable; its status is not recorded", "machine", m.ID, "err", err)
	}
	if err := p.Store.SetMachineTransportSeen(ctx, m.ID, transport, addr); err != nil && !store.Unavailable(err) {
		p.log().Warn("could not record how a machine connected", "machine", m.ID, "transport", transport, "err", err)
	}
	p.event(ctx, store.Event{Source: "machine", Kind: EventConnected, MachineID: m.ID,
		Message: fmt.Sprintf("machine %q connected from %s", m.Name, c.ClientAddress)})
	if p.OnLogin != nil {
		p.OnLogin(context.WithoutCancel(ctx), m.ID, c.Metas[frpconf.MetaCA])
	}
	return nil
}

// use says what a proxy is checked for: opening it or a connection
// through it (a paused tunnel is refused), or closing it (it is not).
type use int

const (
	opening use = iota
	closing
)

// owned checks that proxy name (with the user prefix) and remote port are
// the machine's: its ssh port, its agent port, or one of its tunnels, and,
// unless it is closing, not a paused tunnel. It returns the tunnel id for
// tunnel proxies (0 otherwise).
func (p *Plugin) owned(ctx context.Context, m store.Machine, name string, remotePort int, checkPort bool, u use) (int64, error) {
	o, err := p.ownedAs(ctx, m, name, remotePort, checkPort, u)
	return o.tunnelID, err
}

// owner is whose a proxy is: a tunnel's (tunnelID), a target's (targetID)
// or neither (the ssh and agent proxies), and the proxy type it must have:
// tcp for the ssh and agent proxies and targets, its kind's
// (frpconf.ProxyType) for a tunnel.
type owner struct {
	tunnelID, targetID int64
	typ                string
	// site is the tunnel the proxy serves (its own, or a target's).
	site int64
}

// ownedAs is owned, with the whole owner.
func (p *Plugin) ownedAs(ctx context.Context, m store.Machine, name string, remotePort int, checkPort bool, u use) (owner, error) {
	prefix := frpconf.User(m.ID) + "."
	if !strings.HasPrefix(name, prefix) {
		return owner{}, refusal(fmt.Sprintf("proxy %q is not named for machine %d", name, m.ID))
	}
	short := strings.TrimPrefix(name, prefix)
	want, tunnelID, targetID, typ, site := 0, int64(0), int64(0), "tcp", int64(0)
	switch {
	case short == frpconf.ProxySSH:
		want = m.TunnelPort
	case short == frpconf.ProxyAgent:
		want = m.AgentPort
	case strings.HasPrefix(short, "tunnel-"):
		id, err := strconv.ParseInt(strings.TrimPrefix(short, "tunnel-"), 10, 64)
		if err != nil {
			return owner{}, refusal(fmt.Sprintf("proxy %q is not a tunnel of machine %d", name, m.ID))
		}
		t, err := p.tunnels.Get(p.Store, id, func() (store.Tunnel, error) { return p.Store.GetTunnel(ctx, id) })
		if errors.Is(err, store.ErrNotFound) || (err == nil && t.MachineID != m.ID) {
			return owner{}, refusal(fmt.Sprintf("proxy %q is not a tunnel of machine %d", name, m.ID))
		}
		if err != nil {
			return owner{}, err
		}
		if t.Paused && u == opening {
			return owner{}, refusal(fmt.Sprintf("proxy %q: tunnel %d of machine %d is paused", name, t.ID, m.ID))
		}
		want, tunnelID, typ = t.RemotePort, t.ID, frpconf.ProxyType(t.Kind)
		site = t.ID
	case strings.HasPrefix(short, "target-"):
		id, err := strconv.ParseInt(strings.TrimPrefix(short, "target-"), 10, 64)
		if err != nil {
			return owner{}, refusal(fmt.Sprintf("proxy %q is not a target of machine %d", name, m.ID))
		}
		t, err := p.targets.Get(p.Store, id, func() (store.Target, error) { return p.Store.GetTarget(ctx, id) })
		if errors.Is(err, store.ErrNotFound) || (err == nil && t.MachineID != m.ID) {
			return owner{}, refusal(fmt.Sprintf("proxy %q is not a target of machine %d", name, m.ID))
		}
		if err != nil {
			return owner{}, err
		}
		if t.Paused && u == opening {
			return owner{}, refusal(fmt.Sprintf("proxy %q: tunnel %d, which machine %d serves, is paused", name, t.TunnelID, m.ID))
		}
		want, targetID, site = t.RemotePort, t.ID, t.TunnelID
	default:
		return owner{}, refusal(fmt.Sprintf("proxy %q is not a tunnel of machine %d", name, m.ID))
	}
	if checkPort && remotePort != want {
		return owner{}, refusal(fmt.Sprintf("proxy %q may not bind port %d (machine %d owns %d for it)", name, remotePort, m.ID, want))
	}
	return owner{tunnelID: tunnelID, targetID: targetID, typ: typ, site: site}, nil
}

func (p *Plugin) newProxy(ctx context.Context, c proxyContent) error {
	m, err := p.machine(ctx, c.User.User, c.User.Metas)
	if err != nil {
		return err
	}
	o, err := func() (owner, error) {
		if c.ProxyType != "tcp" && c.ProxyType != "udp" {
			return owner{}, refusal(fmt.Sprintf("proxy %q: type %q is not allowed, only tcp and udp", c.ProxyName, c.ProxyType))
		}
		o, err := p.ownedAs(ctx, m, c.ProxyName, c.RemotePort, true, opening)
		if err == nil && c.ProxyType != o.typ {
			return owner{}, refusal(fmt.Sprintf("proxy %q: type %q is not allowed, its tunnel is %s", c.ProxyName, c.ProxyType, o.typ))
		}
		return o, err
	}()
	var ref refusal
	if errors.As(err, &ref) {
		p.log().Warn("frp proxy refused", "machine", m.ID, "proxy", c.ProxyName, "port", c.RemotePort, "reason", string(ref))
		p.event(ctx, store.Event{Source: "machine", Kind: EventProxyRefused, MachineID: m.ID,
			Message: fmt.Sprintf("machine %q: %s", m.Name, ref)})
		return err
	}
	if err != nil {
		return err
	}
	p.proxyChanged(o)
	if o.targetID != 0 {
		return p.targetStatus(ctx, m, o.targetID, "online", c.RemotePort)
	}
	if tunnelID := o.tunnelID; tunnelID != 0 {
		if err := p.Store.SetTunnelStatus(ctx, tunnelID, "online"); err != nil && !errors.Is(err, store.ErrNotFound) {
			if !store.Unavailable(err) {
				return err
			}
			p.log().Warn("tunnel opened while the database is unavailable; its status is not recorded", "tunnel", tunnelID, "err", err)
		}
		p.event(ctx, store.Event{Source: "tunnel", Kind: EventTunnelUp, MachineID: m.ID, TunnelID: tunnelID,
			Message: fmt.Sprintf("tunnel %d of machine %q is up on port %d", tunnelID, m.Name, c.RemotePort)})
		return nil
	}
	if c.ProxyName == frpconf.User(m.ID)+"."+frpconf.ProxySSH {
		// The ssh proxy, which every session has, is up: the machine is
		// connected, also when its session's login came before the end of
		// the session it replaced (frps closes that one's proxies, which
		// marked the machine down, before it opens the new ones).
		p.session(m.ID, c.User.RunID)
		if err := p.setStatus(ctx, m.ID, "online", p.now()); err != nil && !errors.Is(err, store.ErrNotFound) && !store.Unavailable(err) {
			return err
		}
	}
	return nil
}

// proxyChanged tells OnProxy of a tunnel or target proxy opening or
// closing.
func (p *Plugin) proxyChanged(o owner) {
	if p.OnProxy != nil && o.site != 0 {
		p.OnProxy(o.site)
	}
}

// targetStatus records a target's proxy opening (online) or closing
// (offline) on port, as an event of its tunnel.
func (p *Plugin) targetStatus(ctx context.Context, m store.Machine, targetID int64, status string, port int) error {
	t, err := p.Store.GetTarget(ctx, targetID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) || store.Unavailable(err) {
			return nil
		}
		return err
	}
	if err := p.Store.SetTargetStatus(ctx, targetID, status); err != nil && !errors.Is(err, store.ErrNotFound) {
		if !store.Unavailable(err) {
			return err
		}
		p.log().Warn("target status not recorded: the database is unavailable", "target", targetID, "err", err)
	}
	kind, msg := EventTunnelUp, fmt.Sprintf("machine %q's part of tunnel %d is up on port %d", m.Name, t.TunnelID, port)
	if status != "online" {
		kind, msg = EventTunnelDown, fmt.Sprintf("machine %q's part of tunnel %d is down", m.Name, t.TunnelID)
	}
	p.event(ctx, store.Event{Source: "tunnel", Kind: kind, MachineID: m.ID, TunnelID: t.TunnelID, Message: msg})
	return nil
}

// closeProxy records a proxy going away. Closing the ssh proxy, which every
// session has, means the machine disconnected. A deleted machine's proxies
// close silently.
func (p *Plugin) closeProxy(ctx context.Context, c proxyContent) error {
	m, err := p.machine(ctx, c.User.User, c.User.Metas)
	if err != nil {
		return nil
	}
	if p.staleSession(m.ID, c.User.RunID) {
		p.log().Debug("a replaced session's proxy closed; the machine's current session stands", "machine", m.ID, "proxy", c.ProxyName)
		return nil
	}
	o, err := p.ownedAs(ctx, m, c.ProxyName, 0, false, closing)
	if err != nil {
		return nil
	}
	p.proxyChanged(o)
	if o.targetID != 0 {
		return p.targetStatus(ctx, m, o.targetID, "offline", 0)
	}
	now := p.now()
	if tunnelID := o.tunnelID; tunnelID != 0 {
		if err := p.Store.SetTunnelStatus(ctx, tunnelID, "offline"); err != nil && !errors.Is(err, store.ErrNotFound) && !store.Unavailable(err) {
			return err
		}
		p.event(ctx, store.Event{Source: "tunnel", Kind: EventTunnelDown, MachineID: m.ID, TunnelID: tunnelID,
			Message: fmt.Sprintf("tunnel %d of machine %q is down", tunnelID, m.Name)})
		return nil
	}
	if c.ProxyName == frpconf.User(m.ID)+"."+frpconf.ProxySSH {
		if err := p.setStatus(ctx, m.ID, "offline", now); err != nil && !errors.Is(err, store.ErrNotFound) && !store.Unavailable(err) {
			return err
		}
		p.event(ctx, store.Event{Source: "machine", Kind: EventDisconnected, MachineID: m.ID,
			Message: fmt.Sprintf("machine %q disconnected", m.Name)})
	}
	return nil
}

// newUserConn lets a connection through only while the machine and the
// tunnel still exist and the tunnel is not paused: deleting either, or
// pausing the tunnel, stops new traffic at once. A
// connection like one accepted since the database last changed is let
// through without the lookups (Plugin.conns).
func (p *Plugin) newUserConn(ctx context.Context, c proxyContent) error {
	secret := c.User.Metas[frpconf.MetaToken]
	key := userConnKey{secretHash: auth.HashToken(secret), user: c.User.User, proxy: c.ProxyName}
	_, err := p.conns.Get(p.Store, key, func() (struct{}, error) {
		m, err := p.machine(ctx, c.User.User, c.User.Metas)
		if err != nil {
			return struct{}{}, err
		}
		_, err = p.owned(ctx, m, c.ProxyName, 0, false, opening)
		return struct{}{}, err
	})
	return err
}
