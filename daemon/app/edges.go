package app

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// EdgeBeat is how often an edge records in the database that it is up
// (store.EdgeDeadAfter later the others count it as down).
const EdgeBeat = 10 * time.Second

// edgeSelf is this daemon's own row among the edges: its id is 0 until
// the first heartbeat has been written. tunnelVersion is the version of
// the tunnel server it runs, as recorded ("" until known).
type edgeSelf struct {
	id            atomic.Int64
	tunnelVersion atomic.Pointer[string]
	// refusedSince is when this edge's frps last began refusing
	// connections, nothing listening (nil while it answers).
	refusedSince atomic.Pointer[time.Time]
}

// TunnelVersion is the version of this edge's tunnel server as recorded:
// as frps last answered, or, before it has answered this daemon, as it
// answered the last one ("" when never).
func (e *edgeSelf) TunnelVersion() string {
	if v := e.tunnelVersion.Load(); v != nil {
		return *v
	}
	return ""
}

// observeTunnelServer asks frps its version and records it where it
// differs from what is recorded. frps silent (starting, stopped): what is
// recorded stands, as a reconcile decides nothing from silence.
func (a *App) observeTunnelServer(ctx context.Context) {
	if a.frps == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	v, err := a.frps.Version(cctx)
	cancel()
	before := a.edge.tunnelVersion.Load()
	if err != nil || (before != nil && v == *before) {
		return
	}
	// Held before it is announced: the reconcile the announcement wakes
	// renders with it.
	a.edge.tunnelVersion.Store(&v)
	if err := a.Store.SetEdgeTunnelVersion(ctx, a.Config.EdgeName, v); err != nil {
		// Before the first heartbeat, or the database is away: the next
		// round asks again.
		a.edge.tunnelVersion.CompareAndSwap(&v, before)
		return
	}
	a.Log.Info("this edge's tunnel server answers", "version", v)
}

// Edge returns this daemon's edge id (0 while not known yet) and name.
func (a *App) Edge() (int64, string) { return a.edge.id.Load(), a.Config.EdgeName }

// beat records that this edge is up, with the address machines dial it
// at (asked now: it may have changed since the last beat), then settles
// the machines' status, for edges that went down meanwhile.
func (a *App) beat(ctx context.Context) error {
	now := time.Now()
	addr, err := a.Reach.TunnelHost(ctx)
	if err != nil && !errors.Is(err, reach.ErrNoAddress) {
		return err
	}
	self, _ := a.Edge()
	e, err := a.Store.EdgeHeartbeatAs(ctx, self, a.Config.EdgeName, addr, a.Config.Version, a.Config.FRPSPort, now)
	if err != nil {
		return err
	}
	a.edge.id.Store(e.ID)
	if a.edge.tunnelVersion.Load() == nil {
		a.edge.tunnelVersion.Store(&e.TunnelVersion)
	}
	if _, err := a.Store.SettleMachines(ctx, now); err != nil {
		return err
	}
	gone, err := a.Edges.ForgetRetired(ctx)
	for _, name := range gone {
		a.Log.Info("a retired edge is forgotten: no machine is connected through it", "edge", name)
	}
	return err
}

// heartbeat beats every EdgeBeat until ctx ends. A beat that fails (the
// database is away) is logged once per outage; the edge keeps serving.
func (a *App) heartbeat(ctx context.Context) error {
	t := time.NewTicker(EdgeBeat)
	defer t.Stop()
	failing := false
	for {
		if err := a.beat(ctx); err != nil && ctx.Err() == nil {
			if !failing {
				a.Log.Warn("could not record this edge's heartbeat", "edge", a.Config.EdgeName, "err", err)
			}
			failing = true
		} else {
			failing = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.beatWake.C():
		}
	}
}

// sharedTimeout bounds each call clusterFailures makes: a login must not
// wait on a slow database; without an answer the counts are this edge's.
const sharedTimeout = 300 * time.Millisecond

// clusterFailures is auth.SharedFailures in the shared database.
type clusterFailures struct {
	store *store.Store
	edge  string
	// scope keeps one limiter's failures apart from another's: "" for
	// the dashboard's login, "join" for the machines' doors (bootstrap,
	// rejoin, transport).
	scope string
}

// key is what the failures of prefix are stored under.
func (c clusterFailures) key(prefix netip.Prefix) string {
	if c.scope == "" {
		return prefix.String()
	}
	return c.scope + "@" + prefix.String()
}

func (c clusterFailures) Add(key netip.Prefix, at time.Time) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
	defer cancel()
	id, err := c.store.InsertAuthFailure(ctx, c.edge, c.key(key), at)
	if err != nil {
		return 0
	}
	return id
}

func (c clusterFailures) Remove(id int64) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.store.DeleteAuthFailure(ctx, id)
	}()
}

func (c clusterFailures) Others(key netip.Prefix, now time.Time) (forKey, global []time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
	defer cancel()
	forKey, global, err := c.store.OtherAuthFailures(ctx, c.edge, c.key(key),
		now.Add(-auth.FailureWindow), auth.MaxFailures, now.Add(-auth.GlobalWindow), auth.GlobalFailures)
	if err != nil {
		return nil, nil
	}
	return forKey, global
}

// lease returns a check that takes or renews the cluster's lease called
// name for ttl and reports whether this edge holds it: the jobs that must
// run once in a cluster run where it is held. On SQLite this edge is the
// cluster, and holds every lease; while the database does not answer, no
// edge can be sure it holds one, and none runs the job.
func (a *App) lease(name string, ttl time.Duration) func(ctx context.Context) bool {
	fence := a.leaseFence(name, ttl)
	return func(ctx context.Context) bool { return fence(ctx) > 0 }
}

// leaseFence is lease that returns the lease's fence (0 when this edge
// does not hold it), for a job whose writes carry it.
func (a *App) leaseFence(name string, ttl time.Duration) func(ctx context.Context) int64 {
	return func(ctx context.Context) int64 {
		fence, err := a.Store.LeaseFence(ctx, name, a.Config.EdgeName, ttl, time.Now())
		if err != nil {
			a.Log.Debug("could not take the lease", "lease", name, "err", err)
		}
		return fence
	}
}

// peerAddresses returns the addresses of the other edges that are up.
func (a *App) peerAddresses(ctx context.Context) ([]string, error) {
	list, err := a.Store.ListEdges(ctx)
	if err != nil {
		return nil, err
	}
	self, _ := a.Edge()
	now := time.Now()
	var out []string
	for _, e := range list {
		if e.ID != self && e.Address != "" && e.Up(now) && e.RetiringAt == nil {
			out = append(out, e.Address)
		}
	}
	return out, nil
}

// otherEdges reports whether the cluster has edges besides this one.
func (a *App) otherEdges(ctx context.Context) (bool, error) {
	list, err := a.Store.ListEdges(ctx)
	if err != nil {
		return false, err
	}
	self, _ := a.Edge()
	for _, e := range list {
		if e.ID != self && e.RetiringAt == nil {
			return true, nil
		}
	}
	return false, nil
}

// servedMachines says which machines this edge delivers client configs
// to: every one on a box that is its cluster's only edge; on one edge of
// several, the machines connected through it (the others' configs name
// another edge's address, and their agents are reached through it).
func (a *App) servedMachines(ctx context.Context) (func(id int64) bool, error) {
	others, err := a.otherEdges(ctx)
	if err != nil || !others {
		return nil, err
	}
	self, _ := a.Edge()
	conns, err := a.Store.MachineEdges(ctx)
	if err != nil {
		return nil, err
	}
	mine := map[int64]bool{}
	for id, cs := range conns {
		for _, c := range cs {
			if c.EdgeID == self && c.Status == "online" {
				mine[id] = true
			}
		}
	}
	return func(id int64) bool { return mine[id] }, nil
}

// clusterEdges lists the edges every machine keeps a tunnel client for:
// each edge of the cluster but those being retired (an edge that is down
// stays: its clients reconnect when it is back), this one with the address
// machines reach it at asked now. The list is read at most every
// edgeListTTL (a delivery pass asks once per machine) and, while the
// database is away, the last one read serves.
func (a *App) clusterEdges(ctx context.Context) ([]machines.EdgeTarget, error) {
	list, err := a.edgeList.get(ctx, a.Store.ListEdges)
	if err != nil {
		return nil, err
	}
	self, name := a.Edge()
	var out []machines.EdgeTarget
	for _, e := range list {
		if e.RetiringAt != nil {
			continue
		}
		t := machines.EdgeTarget{ID: e.ID, Name: e.Name, Host: e.Address, Port: e.TunnelPort, TunnelVersion: e.TunnelVersion}
		if e.ID == self || e.Name == name {
			t.TunnelVersion = a.edge.TunnelVersion()
			host, err := a.Reach.TunnelHost(ctx)
			if err != nil && !errors.Is(err, reach.ErrNoAddress) {
				return nil, err
			}
			t.Host, t.Port = host, a.Config.FRPSPort
		}
		out = append(out, t)
	}
	return out, nil
}

// edgeListTTL is how long clusterEdges keeps a list of edges.
const edgeListTTL = 2 * time.Second

// edgeListCache keeps the last list of edges read.
type edgeListCache struct {
	mu   sync.Mutex
	at   time.Time
	list []store.Edge
}

// forget has the next caller read the list again: an edge joined,
// changed or left. The list kept still serves while the database is away.
func (c *edgeListCache) forget() {
	c.mu.Lock()
	c.at = time.Time{}
	c.mu.Unlock()
}

func (c *edgeListCache) get(ctx context.Context, load func(context.Context) ([]store.Edge, error)) ([]store.Edge, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.list != nil && time.Since(c.at) < edgeListTTL {
		return c.list, nil
	}
	list, err := load(ctx)
	if err != nil {
		if c.list != nil && store.Unavailable(err) {
			return c.list, nil
		}
		return nil, err
	}
	c.list, c.at = list, time.Now()
	return list, nil
}
