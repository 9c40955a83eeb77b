// Package delivery brings every machine's client config to the desired
// state and keeps it there.
//
// Each machine has a desired config generation, raised whenever the config
// the daemon would render for it changes (a tunnel created, changed or
// deleted, a new domain or server host, a new tunnel CA), and an applied
// generation, which its agent reports after each delivery. The Reconciler
// delivers until the two are equal: at once when a machine falls behind,
// then with backoff (1 s, 2 s, 4 s … capped at 60 s), and again at once
// whenever a machine that is behind logs in or pings its tunnel server. No
// change is fired and forgotten: a machine whose agent was unreachable for a
// while gets what it missed as soon as it answers.
package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/backoff"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/wakeup"
)

// Agents is what the reconciler needs of machines' agents.
type Agents interface {
	PutConfig(ctx context.Context, id int64, config string, gen int64) (int64, error)
	RestartTunnel(ctx context.Context, id int64) (string, error)
}

// Configs renders what a machine should run.
type Configs interface {
	DesiredConfig(ctx context.Context, m store.Machine) (cfg, server string, err error)
}

// PassConfigs is what Configs also is when a pass over every machine can
// read what their configs are rendered from once, instead of several
// queries a machine: the Renderer is the pass's Configs (and EdgeConfigs).
type PassConfigs interface {
	Renderer(ctx context.Context) (*machines.Renderer, error)
}

// A pass's Renderer renders the other edges' clients too.
var _ interface {
	Configs
	EdgeConfigs
} = (*machines.Renderer)(nil)

// EdgeConfigs is what Configs also is on a cluster of several edges: the
// machine's clients for the edges besides its home edge (none with one
// edge). They are part of the desired generation.
type EdgeConfigs interface {
	DesiredEdges(ctx context.Context, m store.Machine) ([]agent.EdgeClient, error)
}

// EdgeAgents is what Agents also is when they can send a machine its
// whole set of clients. PutClients fails with agentclient.ErrOneClient
// when the machine's agent runs one client only.
type EdgeAgents interface {
	PutClients(ctx context.Context, id int64, set agent.ClientSet) (int64, error)
}

// CapabilityAgents is what Agents also is when it can ask an agent what it
// takes (GET /status's capabilities).
type CapabilityAgents interface {
	AgentCapabilities(ctx context.Context, id int64) ([]string, error)
}

// Defaults.
const (
	MinBackoff = time.Second
	MaxBackoff = 60 * time.Second
	// OnlineMaxBackoff caps the backoff of a machine whose tunnel client is
	// connected: its agent, once back, gets the config within seconds (a
	// try costs a loopback connection that its frpc refuses at once).
	OnlineMaxBackoff = 5 * time.Second
	// FullPass is how often every machine's desired config is rendered
	// again even when nothing announced a change.
	FullPass = 30 * time.Second
	// PassPace: after a full pass that took d, the next one that a change
	// asks for starts PassPace×d after it began at the earliest.
	PassPace = 4
	// AttemptTimeout bounds one delivery.
	AttemptTimeout = 20 * time.Second
	// Workers bounds deliveries in flight.
	Workers = 8
	// MaxReadBackoff caps the wait between tries to read the machines
	// while the store fails (a database that is down): well within the
	// 10 s in which deliveries resume once it is back.
	MaxReadBackoff = 4 * time.Second
	// ReadWarnEvery is how often a store that keeps failing is warned
	// about again, after the first failure.
	ReadWarnEvery = 30 * time.Second
)

// Reconciler delivers client configs until every machine runs its desired
// generation. Build it with New; run it with Run.
type Reconciler struct {
	store   *store.Store
	configs Configs
	agents  Agents
	// needsRestart says whether a machine's running tunnel client must
	// restart to take a config (it pins another tunnel CA).
	needsRestart func(ctx context.Context, id int64) bool
	serves       func(ctx context.Context) (func(id int64) bool, error)
	log          *slog.Logger
	now          func() time.Time

	wake wakeup.Signal

	mu    sync.Mutex
	dirty bool
	last  time.Time     // of the last full pass
	took  time.Duration // how long the last full pass took
	// passing: a full pass runs (byChange: one a change asked for);
	// stream: a change came while such a pass ran (changes come faster
	// than passes end: the next pass is paced).
	passing, byChange, stream bool
	ms                        map[int64]*state
	busy                      int
	// read: reading the machines has failed fails times in a row; the
	// next try is not before next, and the last warning was at warned.
	read struct {
		fails  int
		next   time.Time
		warned time.Time
	}
}

// state is what the reconciler remembers of a machine that is behind.
type state struct {
	failures int
	next     time.Time
	inFlight bool
	// forced: deliver even when the machine reports the desired
	// generation (its running client must restart onto it).
	forced bool
	// nudged: the machine was heard from while a delivery ran; should
	// that one fail, the next goes at once instead of after the backoff.
	nudged bool
	// reconnect: the edges (besides its home edge) whose tunnel client
	// the machine restarts with the next delivery; home: the home edge's
	// client (revtunnel-client.service) restarts too.
	reconnect []string
	home      bool
	// again: a pass found the machine behind while a delivery ran, which
	// may carry what was desired before: deliver again once it ends.
	again bool
}

// Options are New's.
type Options struct {
	Store   *store.Store
	Configs Configs
	Agents  Agents
	// NeedsRestart (may be nil) says whether the machine's tunnel client
	// must restart to take its config besides a new server address.
	NeedsRestart func(ctx context.Context, id int64) bool
	// Serves (may be nil: every machine) returns, for one pass, which
	// machines this reconciler delivers to: on one edge of several, those
	// connected through it. Another edge renders another server address,
	// and reaches the machine's agent only through its own tunnel server.
	Serves func(ctx context.Context) (func(id int64) bool, error)
	Log    *slog.Logger
	Now    func() time.Time
}

// New builds a Reconciler.
func New(o Options) *Reconciler {
	r := &Reconciler{store: o.Store, configs: o.Configs, agents: o.Agents, needsRestart: o.NeedsRestart, serves: o.Serves,
		log: o.Log, now: o.Now, ms: map[int64]*state{}, dirty: true}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.now == nil {
		r.now = time.Now
	}
	return r
}

// Backoff is the wait after the n-th failed delivery in a row (n ≥ 1).
func Backoff(n int) time.Duration { return backoff.Doubling(n, MinBackoff, MaxBackoff) }

// ReadBackoff is the wait after the n-th failed read of the machines in a
// row (n ≥ 1): 250 ms, doubling, capped at MaxReadBackoff.
func ReadBackoff(n int) time.Duration {
	d := 250 * time.Millisecond
	for i := 1; i < n && d < MaxReadBackoff; i++ {
		d *= 2
	}
	return min(d, MaxReadBackoff)
}

func (r *Reconciler) poke() { r.wake.Notify() }

// Changed is the store's change hook: a change to tunnels or settings may
// change what machines should run. It never blocks.
func (r *Reconciler) Changed(topic string) {
	switch topic {
	case store.TopicTunnels, store.TopicSettings, store.TopicEdges:
		r.mu.Lock()
		r.dirty = true
		// A change during the periodic pass is no stream: rendered as soon
		// as that pass ends. (Paced after it, a single change waited
		// PassPace times a whole pass: 3.1 s at 2,000 machines on
		// PostgreSQL.)
		r.stream = r.stream || (r.passing && r.byChange)
		r.mu.Unlock()
		r.poke()
	}
}

// Nudge is called when a machine logs in or pings: if it is behind, it is
// delivered to now, whatever its backoff. It never blocks.
func (r *Reconciler) Nudge(id int64) {
	r.mu.Lock()
	st, behind := r.ms[id]
	if behind && st.inFlight {
		st.nudged = true
	} else if behind {
		st.next = time.Time{}
	}
	r.mu.Unlock()
	if behind {
		r.poke()
	}
}

// Redeliver delivers machine id's config once more even if it is in step:
// its running tunnel client must restart to take it (see
// agentclient.Rollout). It never blocks.
func (r *Reconciler) Redeliver(id int64) { r.force(id, func(*state) {}) }

// force marks machine id for a delivery at once (after the one in flight),
// even if it is in step, with what also changes its state.
func (r *Reconciler) force(id int64, also func(st *state)) {
	r.mu.Lock()
	st, ok := r.ms[id]
	if !ok {
		st = &state{}
		r.ms[id] = st
	}
	st.forced = true
	also(st)
	if !st.inFlight {
		st.next = time.Time{}
	}
	r.mu.Unlock()
	r.poke()
}

// addReconnect adds edges to the clients the next delivery restarts.
func (st *state) addReconnect(edges ...string) {
	for _, e := range edges {
		if !slices.Contains(st.reconnect, e) {
			st.reconnect = append(st.reconnect, e)
		}
	}
}

// Reconnect delivers machine id's set of clients once more, even if it is
// in step, and has its agent restart the client of edge (its home edge's
// when home): the machine is not connected to that edge, which is up, and
// frpc would try again only after its backoff. It never blocks.
func (r *Reconciler) Reconnect(id int64, edge string, home bool) {
	r.force(id, func(st *state) {
		if home {
			st.home = true
		} else {
			st.addReconnect(edge)
		}
	})
}

// restarts is what a delivery restarts besides installing the set: the
// clients of these edges, and the home edge's when home.
type restarts struct {
	edges []string
	home  bool
}

// InFlight is how many deliveries are running now.
func (r *Reconciler) InFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.busy
}

// Run reconciles until ctx ends.
func (r *Reconciler) Run(ctx context.Context) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		r.pass(ctx, &wg)
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake.C():
		case <-tick.C:
		}
	}
}

// pass renders desired configs when something changed (or FullPass went
// by), then starts the deliveries that are due.
func (r *Reconciler) pass(ctx context.Context, wg *sync.WaitGroup) {
	now := r.now()
	r.mu.Lock()
	// A change renders every machine at once, unless changes come faster
	// than passes end (one came while the last pass a change asked for
	// ran: a fleet joining, a script making tunnels): then the next pass
	// waits PassPace times as long as the last one took, so that passes
	// take at most a share of a processor however many changes and
	// machines there are. The ticker brings it when due.
	paced := !r.stream || now.Sub(r.last) >= PassPace*r.took
	full := ((r.dirty && paced) || now.Sub(r.last) >= FullPass) && !now.Before(r.read.next)
	if full {
		r.byChange = r.dirty
		r.dirty, r.stream, r.passing, r.last = false, false, true, now
	}
	r.mu.Unlock()
	if full {
		r.readMachines(ctx, now)
		took := r.now().Sub(now)
		r.mu.Lock()
		r.took, r.passing = took, false
		r.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, st := range r.ms {
		if r.busy >= Workers {
			return
		}
		if st.inFlight || now.Before(st.next) {
			continue
		}
		st.inFlight = true
		forced := st.forced
		st.forced = false
		rs := restarts{edges: st.reconnect, home: st.home}
		st.reconnect, st.home = nil, false
		r.busy++
		wg.Add(1)
		go func(id int64) {
			defer wg.Done()
			r.deliver(ctx, id, forced, rs)
		}(id)
	}
}

// readMachines refreshes; when the store fails (a database that is down),
// it tries again with backoff, and warns at the first failure, every
// ReadWarnEvery while they go on, and once reading works again.
func (r *Reconciler) readMachines(ctx context.Context, now time.Time) {
	err := r.refresh(ctx)
	if ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		if r.read.fails > 0 {
			r.log.Info("config delivery: reading the machines again", "failed_tries", r.read.fails)
		}
		r.read.fails, r.read.next, r.read.warned = 0, time.Time{}, time.Time{}
		return
	}
	r.dirty = true
	r.read.fails++
	wait := ReadBackoff(r.read.fails)
	r.read.next = now.Add(wait)
	r.log.Debug("config delivery: reading the machines failed", "err", err, "failed_tries", r.read.fails, "retry_in", wait)
	switch {
	case r.read.fails == 1:
		r.log.Warn("config delivery: could not read the machines; trying again with backoff", "err", err, "retry_in", wait)
		r.read.warned = now
	case now.Sub(r.read.warned) >= ReadWarnEvery:
		r.log.Warn("config delivery: still cannot read the machines", "err", err, "failed_tries", r.read.fails, "retry_in", wait)
		r.read.warned = now
	}
}

// refresh records every machine's desired generation and which are behind.
func (r *Reconciler) refresh(ctx context.Context) error {
	ms, err := r.store.ListMachines(ctx)
	if err != nil {
		return err
	}
	var serves func(int64) bool
	if r.serves != nil {
		if serves, err = r.serves(ctx); err != nil {
			return err
		}
	}
	// What every machine's config is rendered from, read once for the
	// pass where Configs can.
	var configs Configs = r.configs
	if pc, ok := r.configs.(PassConfigs); ok {
		rd, err := pc.Renderer(ctx)
		if err != nil {
			return err
		}
		configs = rd
	}
	behind := map[int64]bool{}
	for _, m := range ms {
		if serves != nil && !serves(m.ID) {
			continue // another edge's to deliver
		}
		cs, err := r.desire(ctx, configs, m)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			// Nothing can be delivered: say why on the machine.
			r.record(ctx, m, err)
			behind[m.ID] = false
			continue
		}
		if !cs.InStep() {
			behind[m.ID] = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, st := range r.ms {
		if _, ok := behind[id]; !ok && !st.inFlight && !st.forced {
			delete(r.ms, id)
		}
	}
	for id, deliverable := range behind {
		if !deliverable {
			delete(r.ms, id)
			continue
		}
		if st, ok := r.ms[id]; !ok {
			r.ms[id] = &state{}
		} else if st.inFlight {
			st.again = true
		}
	}
	return nil
}

// Desire renders machine id's config now, records it as desired (a new
// generation when it changed) and delivers it at once, even if the
// machine reports it in step: what a rejoin (a new credential) or a change
// of transport asks for. The reconciler stays the one writer of desired
// state.
func (r *Reconciler) Desire(ctx context.Context, id int64) error {
	m, err := r.store.GetMachine(ctx, id)
	if err != nil {
		return err
	}
	_, err = r.desire(ctx, r.configs, m)
	r.Redeliver(id)
	return err
}

// desire renders machine m's config from c and records its digest; the
// desired generation rises when it changed.
func (r *Reconciler) desire(ctx context.Context, c Configs, m store.Machine) (store.ConfigState, error) {
	cfg, server, edges, err := r.render(ctx, c, m)
	if err != nil {
		return m.Config, err
	}
	return r.recordDesired(ctx, m, cfg, edges, server)
}

// render is machine m's desired main config, the server it names, and its
// clients for the other edges, from c.
func (r *Reconciler) render(ctx context.Context, c Configs, m store.Machine) (cfg, server string, edges []agent.EdgeClient, err error) {
	cfg, server, err = c.DesiredConfig(ctx, m)
	if err != nil {
		return "", "", nil, err
	}
	if ec, ok := c.(EdgeConfigs); ok {
		if edges, err = ec.DesiredEdges(ctx, m); err != nil {
			return "", "", nil, err
		}
	}
	return cfg, server, edges, nil
}

// recordDesired records cfg and edges as what machine m should run. Most passes find
// the digest unchanged: that needs no transaction (which would take the
// store's one writer slot just to read).
func (r *Reconciler) recordDesired(ctx context.Context, m store.Machine, cfg string, edges []agent.EdgeClient, server string) (store.ConfigState, error) {
	digest := machines.DesiredDigest(cfg, edges)
	if m.Config.DesiredHash == digest {
		return m.Config, nil
	}
	// A machine from before generations, whose last delivery worked,
	// runs what the daemon last rendered for it.
	adopt := m.Config.DesiredHash == "" && m.ConfigPush != nil && m.ConfigPush.OK
	return r.store.SetDesiredConfig(ctx, m.ID, digest, adopt, server, r.now())
}

// deliver makes one delivery to machine id.
func (r *Reconciler) deliver(ctx context.Context, id int64, forced bool, rs restarts) {
	online, err := r.attempt(ctx, id, forced, rs)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.busy--
	st, ok := r.ms[id]
	if !ok {
		return
	}
	st.inFlight = false
	nudged := st.nudged
	st.nudged = false
	again := st.again
	st.again = false
	switch {
	case err == nil && (again || st.forced):
		// Asked for again while this delivery ran (a pass found the
		// machine behind, or Desire raised its generation when its agent
		// reported a new tunnel client): at once, not at the next full pass.
		st.failures, st.next = 0, time.Time{}
	case err == nil, errors.Is(err, store.ErrNotFound), ctx.Err() != nil:
		delete(r.ms, id)
	default:
		st.failures++
		wait := Backoff(st.failures)
		if online {
			wait = min(wait, OnlineMaxBackoff)
		}
		st.next = r.now().Add(wait)
		if nudged {
			st.next = time.Time{}
		}
		st.forced = st.forced || forced
		// The restarts asked for are asked again with the retry.
		st.home = st.home || rs.home
		st.addReconnect(rs.edges...)
	}
}

func (r *Reconciler) attempt(ctx context.Context, id int64, forced bool, rs restarts) (online bool, err error) {
	m, err := r.store.GetMachine(ctx, id)
	if err != nil {
		return false, err
	}
	online = m.Status == "online"
	return online, r.attemptOn(ctx, m, forced, rs)
}

func (r *Reconciler) attemptOn(ctx context.Context, m store.Machine, forced bool, rs restarts) error {
	id := m.ID
	cfg, server, edges, err := r.render(ctx, r.configs, m)
	if err != nil {
		r.record(ctx, m, err)
		return err
	}
	cs, err := r.recordDesired(ctx, m, cfg, edges, server)
	if err != nil {
		return err
	}
	if cs.InStep() && !forced {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
	defer cancel()
	applied, oneClient, err := r.put(actx, m, cfg, edges, cs.DesiredGen, rs.edges)
	if err == nil {
		// frpc's reload applies proxies only: a new server address or
		// tunnel CA needs a restart.
		restart := (cs.AppliedServer != "" && cs.AppliedServer != server) ||
			(r.needsRestart != nil && r.needsRestart(actx, id))
		if restart || rs.home {
			if _, rerr := r.agents.RestartTunnel(actx, id); rerr != nil {
				err = fmt.Errorf("config generation %d installed, but restarting the tunnel client to take it failed: %w", cs.DesiredGen, rerr)
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		r.record(ctx, m, err)
		r.log.Warn("config delivery failed; retrying with backoff", "machine_id", id, "generation", cs.DesiredGen, "err", err)
		return err
	}
	if err := r.store.SetConfigApplied(ctx, id, applied, server, r.now()); err != nil {
		return err
	}
	if oneClient {
		note := store.ConfigPush{OK: true, At: r.now().UTC(), Message: fmt.Sprintf("config generation %d applied to the client of the machine's "+
			"home edge only: its agent runs one tunnel client, so it is not reachable through the other %d edge(s); update the machine", applied, len(edges))}
		if err := r.store.SetConfigPush(ctx, id, note); err != nil {
			return err
		}
	}
	r.log.Info("client config applied", "machine_id", id, "generation", applied)
	if applied < cs.DesiredGen {
		return fmt.Errorf("the agent applied generation %d, not %d", applied, cs.DesiredGen)
	}
	return nil
}

// put sends generation gen: the whole set of clients when the cluster has
// several edges or the agent can take a set (a set with no other edge
// removes the clients of edges that were retired), else the main config
// alone; to an agent that runs one client only, the main config (oneClient
// says so when there were other edges).
//
// reconnect names edges whose client restarts even when its config is
// unchanged; an agent that cannot do that (no agent.ReconnectCapability)
// gets the set without it, and its client tries again by itself.
func (r *Reconciler) put(ctx context.Context, m store.Machine, cfg string, edges []agent.EdgeClient, gen int64, reconnect []string) (applied int64, oneClient bool, err error) {
	main := agent.WithGeneration(cfg, gen)
	ea, ok := r.agents.(EdgeAgents)
	// With no other edge, the set is sent when the agent takes one (it may
	// run clients of edges since retired). An agent that has not said yet
	// is asked first; one that does not answer (an agent that predates
	// signed requests, another program on its port) gets the main config,
	// as before edges.
	takesSet := m.Report.Can(agent.ClientsCapability)
	if ok && len(edges) == 0 && !takesSet && m.Report.At.IsZero() {
		if ca, can := r.agents.(CapabilityAgents); can {
			if caps, err := ca.AgentCapabilities(ctx, m.ID); err == nil {
				takesSet = slices.Contains(caps, agent.ClientsCapability)
			}
		}
	}
	if !ok || len(edges) == 0 && !takesSet {
		applied, err = r.agents.PutConfig(ctx, m.ID, main, gen)
		return applied, len(edges) > 0, err
	}
	set := agent.ClientSet{Generation: gen, Primary: main}
	for _, e := range edges {
		set.Edges = append(set.Edges, agent.EdgeClient{Edge: e.Edge, Config: agent.WithGeneration(e.Config, gen)})
		if slices.Contains(reconnect, e.Edge) && m.Report.Can(agent.ReconnectCapability) {
			set.Reconnect = append(set.Reconnect, e.Edge)
		}
	}
	applied, err = ea.PutClients(ctx, m.ID, set)
	if errors.Is(err, agentclient.ErrOneClient) {
		applied, err = r.agents.PutConfig(ctx, m.ID, main, gen)
		return applied, len(edges) > 0, err
	}
	return applied, false, err
}

// record shows why machine m is behind, in words, until a delivery works.
func (r *Reconciler) record(ctx context.Context, m store.Machine, err error) {
	msg := agentclient.Words(err)
	if m.ConfigPush != nil && !m.ConfigPush.OK && m.ConfigPush.Message == msg {
		return
	}
	p := store.ConfigPush{OK: false, Message: msg, At: r.now().UTC()}
	if werr := r.store.SetConfigPush(context.WithoutCancel(ctx), m.ID, p); werr != nil && !errors.Is(werr, store.ErrNotFound) {
		r.log.Warn("recording the config delivery failed", "machine_id", m.ID, "err", werr)
	}
}
