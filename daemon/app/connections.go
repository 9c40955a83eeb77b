package app

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Every edge (a box alone too) keeps what the database says of the
// machines connected to it true, every ConnEvery or more: its tunnel
// server (frps) is asked which machines are connected now; a connection
// that ended unseen (frps restarted, the edge was powered off) is recorded
// offline, one the plugin missed or recorded in the wrong order online
// (frps tells of a proxy's close from a goroutine of its own, so a close
// can reach the daemon after the opening that followed it). The plugin's
// Login and proxy calls still record changes at once; this heals what no
// call reported, or reported out of order.
//
// On a cluster of several edges, each edge also keeps this true:
//
//   - That each machine it has is connected to every edge that is up. A
//     machine's tunnel client for an edge that was down retries with a
//     backoff that reaches 20 s: once that edge is up again, the first
//     edge that has the machine asks its agent to restart that client, so
//     the machine is back on the edge within seconds instead.

// ConnEvery is how often an edge compares its frps's connections with the
// database and looks for machines missing from an edge that is up; a
// round waits ConnPace times as long as the last one took if that is
// longer (frps lists every client: a large fleet's list is megabytes),
// but never more than ConnAtMost.
const (
	ConnEvery  = 2 * time.Second
	ConnPace   = 20
	ConnAtMost = 30 * time.Second
)

const (
	// connGrace: a change younger than this is left alone (a client that
	// just logged in opens its proxies a moment later).
	connGrace = 3 * time.Second
	// reconnectAfter is how long a machine must be missing from an edge
	// that is up before its agent is asked to reconnect it.
	reconnectAfter = time.Second
	// reconnectMin and reconnectMax bound the wait between two requests to
	// reconnect the same machine to the same edge (doubling in between).
	reconnectMin = 15 * time.Second
	reconnectMax = 5 * time.Minute
)

// missing is a machine's absence from an edge, as this edge follows it.
type missing struct {
	since time.Time // first seen missing
	next  time.Time // no request before
	wait  time.Duration
}

// connWatch is the state of watchConnections between two rounds.
type connWatch struct {
	missing map[[2]int64]*missing // machine id, edge id
}

// watchConnections runs connRound every ConnEvery until ctx ends, after
// asking frps its version (observeTunnelServer).
func (a *App) watchConnections(ctx context.Context) error {
	t := time.NewTicker(ConnEvery)
	defer t.Stop()
	w := &connWatch{missing: map[[2]int64]*missing{}}
	for {
		a.observeTunnelServer(ctx)
		start := time.Now()
		if err := a.connRound(ctx, w, start); err != nil && ctx.Err() == nil && !store.Unavailable(err) {
			a.Log.Debug("edge connections: round failed", "err", err)
		}
		t.Reset(min(max(ConnEvery, ConnPace*time.Since(start)), ConnAtMost))
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// connRound is one round.
func (a *App) connRound(ctx context.Context, w *connWatch, now time.Time) error {
	if a.frps == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	here, err := a.frps.Connected(cctx)
	cancel()
	if a.frpsRefuses(err, now) {
		// Nothing has listened there for frpsGone: no machine is
		// connected through this edge.
		here, err = map[int64]bool{}, nil
	}
	if err != nil {
		// frps does not answer yet (it is starting, or slow): nothing is
		// decided from silence.
		return err
	}
	self, _ := a.Edge()
	if self == 0 {
		return a.settleAlone(ctx, here, now)
	}
	conns, err := a.Store.MachineEdges(ctx)
	if err != nil {
		return err
	}
	if err := a.settleConnections(ctx, self, here, conns, now); err != nil {
		return err
	}
	list, err := a.edgeList.get(ctx, a.Store.ListEdges)
	if err != nil || len(list) < 2 {
		return err
	}
	a.reconnectMissing(ctx, w, self, list, here, conns, now)
	return nil
}

// frpsGone is how long frps must refuse connections (nothing listens:
// stopped, crashed, not installed) before the machines connected through it
// are recorded offline and shown so: a restart takes less.
const frpsGone = 10 * time.Second

// frpsRefuses follows this edge's frps from one round's answer (err): it
// reports whether frps has refused connections for frpsGone by now. A
// timeout or another error is silence, which decides nothing.
func (a *App) frpsRefuses(err error, now time.Time) bool {
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		if err == nil && a.edge.refusedSince.Swap(nil) != nil {
			a.Log.Info("this edge's tunnel server answers again")
		}
		return false
	}
	if a.edge.refusedSince.CompareAndSwap(nil, &now) {
		return false
	}
	_, gone := a.frpsGoneAt(now)
	return gone
}

// frpsGoneAt says whether frps has refused connections for frpsGone at now,
// and since when.
func (a *App) frpsGoneAt(now time.Time) (since time.Time, gone bool) {
	p := a.edge.refusedSince.Load()
	if p == nil {
		return time.Time{}, false
	}
	return *p, now.Sub(*p) >= frpsGone
}

// TunnelServerProblem is "" while this edge's tunnel server answers (or has
// refused for less than frpsGone), else that it is not running, in words:
// what machines.StatusOf says of the machines it had.
func (a *App) TunnelServerProblem() string {
	since, gone := a.frpsGoneAt(time.Now())
	if !gone {
		return ""
	}
	return "nothing has answered on its port since " + since.UTC().Format("15:04:05 MST")
}

// settleAlone is settleConnections on a box with no edges (SQLite): the
// machines' own status.
func (a *App) settleAlone(ctx context.Context, here map[int64]bool, now time.Time) error {
	ms, err := a.Store.ListMachines(ctx)
	if err != nil {
		return err
	}
	for _, m := range ms {
		status := ""
		switch {
		case m.Status == "online" && !here[m.ID]:
			status = "offline"
		case m.Status != "online" && here[m.ID]:
			status = "online"
		}
		if status == "" {
			continue
		}
		// Only while nothing was recorded since frps was asked (now),
		// less connGrace: the store's guard.
		changed, err := a.Store.SettleMachineStatus(ctx, m.ID, status, a.Now(), now.Add(-connGrace))
		if err != nil {
			return err
		}
		if changed {
			a.Log.Info("a machine's connection, as the tunnel server sees it", "machine_id", m.ID, "status", status)
		}
	}
	return nil
}

// settleConnections records what frps says of this edge's connections
// where the database says otherwise.
func (a *App) settleConnections(ctx context.Context, self int64, here map[int64]bool, conns map[int64][]store.MachineEdge, now time.Time) error {
	recorded := map[int64]store.MachineEdge{}
	for id, cs := range conns {
		for _, c := range cs {
			if c.EdgeID == self {
				recorded[id] = c
			}
		}
	}
	set := func(id int64, status string) error {
		// Only while nothing was recorded since frps was asked (now),
		// less connGrace: the store's guard.
		changed, err := a.Store.SettleMachineEdgeStatus(ctx, id, self, status, a.Now(), now.Add(-connGrace))
		if changed {
			a.Log.Info("a machine's connection to this edge, as its tunnel server sees it", "machine_id", id, "status", status)
		}
		return err
	}
	for id, c := range recorded {
		if c.Status == "online" && !here[id] {
			if err := set(id, "offline"); err != nil {
				return err
			}
		}
	}
	for id := range here {
		c, ok := recorded[id]
		if !ok || c.Status != "online" {
			if err := set(id, "online"); err != nil {
				return err
			}
		}
	}
	return nil
}

// reconnectMissing asks the agents of machines connected here to restart
// their client for an edge that is up but does not have them. Only the
// first edge (lowest id) of those that have a machine asks, so one
// request goes out per machine and edge.
func (a *App) reconnectMissing(ctx context.Context, w *connWatch, self int64, list []store.Edge, here map[int64]bool,
	conns map[int64][]store.MachineEdge, now time.Time) {
	up := map[int64]store.Edge{}
	var targets []machines.EdgeTarget
	for _, e := range list {
		if e.RetiringAt == nil {
			targets = append(targets, machines.EdgeTarget{ID: e.ID, Name: e.Name, Host: e.Address, Port: e.TunnelPort})
			if e.Up(now) {
				up[e.ID] = e
			}
		}
	}
	if len(targets) == 0 {
		return // every edge is being retired: no home edge to speak of
	}
	seen := map[[2]int64]bool{}
	for id := range here {
		online := map[int64]bool{self: true}
		for _, c := range conns[id] {
			if c.Status == "online" {
				online[c.EdgeID] = true
			}
		}
		first := self
		for eid := range online {
			if _, ok := up[eid]; ok && eid < first {
				first = eid
			}
		}
		if first != self {
			continue
		}
		var m store.Machine
		for eid, e := range up {
			if online[eid] || e.Address == "" || e.TunnelPort == 0 {
				continue
			}
			key := [2]int64{id, eid}
			seen[key] = true
			ms := w.missing[key]
			if ms == nil {
				ms = &missing{since: now, wait: reconnectMin}
				w.missing[key] = ms
			}
			if now.Sub(ms.since) < reconnectAfter || now.Before(ms.next) {
				continue
			}
			if m.ID == 0 {
				var err error
				if m, err = a.Store.GetMachine(ctx, id); err != nil {
					break
				}
			}
			home := machines.HomeOf(m, targets).ID == eid
			a.Log.Info("a machine is not connected to an edge that is up: asking its agent to restart that tunnel client",
				"machine", m.Name, "edge", e.Name, "missing_for", now.Sub(ms.since).Round(time.Second).String())
			a.Delivery.Reconnect(id, e.Name, home)
			ms.next = now.Add(ms.wait)
			ms.wait = min(2*ms.wait, reconnectMax)
		}
	}
	for key := range w.missing {
		if !seen[key] {
			delete(w.missing, key)
		}
	}
}
