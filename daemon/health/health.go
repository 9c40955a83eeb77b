// Package health watches the targets of http tunnels served by several
// machines. The web proxy (Caddy) decides where requests go with its own
// active health checks; this package makes the same check of each target's
// tunnel port on the VPS's loopback, on the same schedule, so that the
// dashboard can say in words what the last check of each target found. A
// target changing state is an activity event; every target of a site down
// at once is a notification, and so is the first one healthy again.
//
// The results live in memory only: the data path never waits for them,
// and after a restart they are "unknown" until the first check.
package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/notify"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Event kinds of the activity feed (source "tunnel").
const (
	EventTargetUp   = "target_up"
	EventTargetDown = "target_down"
)

// Result is the last check of one target.
type Result struct {
	State     string    // "up" or "down"
	Message   string    // what the check found, in words
	CheckedAt time.Time //
}

// Checker runs the checks. Store is required; the rest have defaults.
type Checker struct {
	Store *store.Store
	Log   *slog.Logger
	// Domain gives the Host header of a site (sub.<domain>); the checks
	// wait while it is unset.
	Domain func(context.Context) (string, error)
	// Notify sends a notification (nil: none).
	Notify func(context.Context, notify.Notification)
	Now    func() time.Time
	// Addr is where a tunnel port is reached (default 127.0.0.1:port).
	Addr func(port int) string
	// Lease, when set, says whether this edge holds the cluster's lease:
	// every edge checks (each shows its own results), and only the holder
	// records the changes and sends the notifications, once for all.
	Lease func(ctx context.Context) bool

	checked store.Memo[struct{}, []store.Tunnel]

	// poked wakes Run for a tunnel whose proxy opened or closed.
	pokeOnce sync.Once
	poked    chan struct{}

	mu      sync.Mutex
	results map[key]Result
	next    map[int64]time.Time // when each tunnel is checked next
	allDown map[int64]bool      // tunnels whose every target is down
}

// key is one target: a tunnel and the remote port of one of its machines
// (its own machine's is the tunnel's remote port).
type key struct {
	tunnel int64
	port   int
}

// Result returns the last check of the target of tunnel on port, if any.
func (c *Checker) Result(tunnel int64, port int) (Result, bool) {
	if c == nil {
		return Result{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.results[key{tunnel, port}]
	return r, ok
}

func (c *Checker) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}

func (c *Checker) log() *slog.Logger {
	if c.Log == nil {
		return slog.Default()
	}
	return c.Log
}

// Run checks every second which tunnels are due, until ctx ends. A
// store that cannot be read is logged when that starts and when it ends,
// not every second.
func (c *Checker) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	failing := ""
	for {
		err := c.Tick(ctx)
		switch {
		case err != nil && ctx.Err() == nil && err.Error() != failing:
			failing = err.Error()
			c.log().Warn("health checks: cannot read the tunnels; the last results stay shown", "err", err)
		case err == nil && failing != "":
			failing = ""
			c.log().Info("health checks: reading the tunnels again")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.pokes():
			// frps asks its plugin before it opens a proxy's port, and
			// tells it as it closes one: the check waits for frps to
			// have done so.
			select {
			case <-ctx.Done():
				return
			case <-time.After(PokeDelay):
			}
		}
	}
}

// PokeDelay is how long after a proxy opened or closed its targets are
// checked.
const PokeDelay = 300 * time.Millisecond

func (c *Checker) pokes() chan struct{} {
	c.pokeOnce.Do(func() { c.poked = make(chan struct{}, 1) })
	return c.poked
}

// ProxyChanged is frps's word, through its plugin, that the proxy of one
// of a tunnel's targets opened or closed: the tunnel's targets are
// checked PokeDelay later instead of at their next turn. A closed proxy's
// port no longer listens, so its target is down within that check, with
// no wait for the interval; an opened one is up once the check passes. It
// does not block.
func (c *Checker) ProxyChanged(tunnel int64) {
	c.mu.Lock()
	if c.next != nil {
		delete(c.next, tunnel)
	}
	c.mu.Unlock()
	select {
	case c.pokes() <- struct{}{}:
	default: // a turn is coming already
	}
}

// target is one machine serving a site, as the checks see it.
type target struct {
	machine   string
	machineID int64
	localPort int
	port      int
}

// Tick checks the targets of every tunnel whose check is due, each
// tunnel's targets at once, and waits for them.
func (c *Checker) Tick(ctx context.Context) error {
	// Read again only after a commit: most seconds nothing changed.
	ts, err := c.checked.Get(c.Store, struct{}{}, func() ([]store.Tunnel, error) { return c.Store.ListCheckedTunnels(ctx) })
	if err != nil {
		return err
	}
	c.mu.Lock()
	nothing := len(ts) == 0 && len(c.results) == 0
	c.mu.Unlock()
	if nothing {
		return nil // nothing to check, nothing to forget
	}
	targets, err := c.Store.ListTargets(ctx, 0)
	if err != nil {
		return err
	}
	ms, err := c.Store.ListMachines(ctx)
	if err != nil {
		return err
	}
	names := map[int64]string{}
	for _, m := range ms {
		names[m.ID] = m.Name
	}
	more := map[int64][]target{}
	for _, t := range targets {
		more[t.TunnelID] = append(more[t.TunnelID], target{names[t.MachineID], t.MachineID, t.LocalPort, t.RemotePort})
	}
	domain := ""
	if c.Domain != nil {
		if domain, err = c.Domain(ctx); err != nil {
			return err
		}
	}
	now := c.now()
	c.mu.Lock()
	if c.results == nil {
		c.results, c.next, c.allDown = map[key]Result{}, map[int64]time.Time{}, map[int64]bool{}
	}
	var due []store.Tunnel
	live := map[int64]bool{}
	for _, t := range ts {
		if t.Kind != "http" || t.Paused || t.Health.Path == "" || domain == "" {
			continue
		}
		live[t.ID] = true
		if now.Before(c.next[t.ID]) {
			continue
		}
		c.next[t.ID] = now.Add(time.Duration(t.Health.IntervalS) * time.Second)
		due = append(due, t)
	}
	// Forget what is no longer checked: a tunnel gone, paused, or whose
	// health check was turned off.
	for k := range c.results {
		if !live[k.tunnel] {
			delete(c.results, k)
		}
	}
	for id := range c.next {
		if !live[id] {
			delete(c.next, id)
			delete(c.allDown, id)
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range due {
		all := append([]target{{names[t.MachineID], t.MachineID, t.LocalPort, t.RemotePort}}, more[t.ID]...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.checkTunnel(ctx, t, t.Subdomain+"."+domain, all)
		}()
	}
	wg.Wait()
	return nil
}

// checkTunnel checks every target of t at once and records what changed.
func (c *Checker) checkTunnel(ctx context.Context, t store.Tunnel, host string, all []target) {
	rs := make([]Result, len(all))
	var wg sync.WaitGroup
	for i, tg := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs[i] = c.Check(ctx, tg.port, host, t.Health, tg.machine, tg.localPort)
		}()
	}
	wg.Wait()
	up := 0
	c.mu.Lock()
	var events []store.Event
	for i, tg := range all {
		k := key{t.ID, tg.port}
		old, known := c.results[k]
		c.results[k] = rs[i]
		if rs[i].State == "up" {
			up++
		}
		if known && old.State == rs[i].State {
			continue
		}
		if !known && rs[i].State == "up" {
			continue // the first check finding it well is no news
		}
		kind := EventTargetUp
		if rs[i].State != "up" {
			kind = EventTargetDown
		}
		events = append(events, store.Event{Source: "tunnel", Kind: kind, MachineID: tg.machineID, TunnelID: t.ID,
			Message: fmt.Sprintf("%s on machine %q (port %d) is %s: %s", host, tg.machine, tg.localPort, rs[i].State, rs[i].Message)})
	}
	wasDown := c.allDown[t.ID]
	c.allDown[t.ID] = up == 0
	c.mu.Unlock()
	told := len(events) > 0 || (up == 0) != wasDown
	if told && c.Lease != nil && !c.Lease(ctx) {
		return // another edge tells
	}
	for _, e := range events {
		e.CreatedAt = c.now()
		if err := c.Store.InsertEvent(ctx, e); err != nil && !store.Unavailable(err) {
			c.log().Warn("health: event not recorded", "err", err)
		}
	}
	if c.Notify == nil {
		return
	}
	switch {
	case up == 0 && !wasDown:
		c.Notify(ctx, notify.Notification{Kind: notify.KindSiteDown, MachineID: t.MachineID,
			Title:   fmt.Sprintf("%s is down", host),
			Message: fmt.Sprintf("Every machine serving %s failed its health check (%s): %s.", host, t.Health.Path, summary(all, rs))})
	case up > 0 && wasDown:
		c.Notify(ctx, notify.Notification{Kind: notify.KindSiteUp, MachineID: t.MachineID,
			Title:   fmt.Sprintf("%s is up again", host),
			Message: fmt.Sprintf("%s answers its health check again: %s.", host, summary(all, rs))})
	}
}

// summary is each target's result, in one line.
func summary(all []target, rs []Result) string {
	parts := make([]string, len(all))
	for i, tg := range all {
		parts[i] = fmt.Sprintf("%s: %s", tg.machine, rs[i].Message)
	}
	return strings.Join(parts, "; ")
}

// Check makes one health check of the target on port: GET h.Path with
// Host host, as Caddy's active check does, and says what it found.
func (c *Checker) Check(ctx context.Context, port int, host string, h store.Health, machine string, localPort int) Result {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if c.Addr != nil {
		addr = c.Addr(port)
	}
	timeout := time.Duration(min(max(h.IntervalS, 1), 5)) * time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+h.Path, nil)
	if err != nil {
		return c.result("down", "the check cannot be made: "+err.Error())
	}
	req.Host = host
	req.Header.Set("User-Agent", "tunnelsvc-health")
	tr := &http.Transport{DisableKeepAlives: true, Proxy: nil}
	defer tr.CloseIdleConnections()
	start := time.Now()
	resp, err := (&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	took := time.Since(start)
	if err != nil {
		return c.result("down", failure(err, port, machine, localPort, timeout))
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	want := "a 2xx status"
	if h.ExpectStatus != 0 {
		ok, want = resp.StatusCode == h.ExpectStatus, fmt.Sprintf("%d", h.ExpectStatus)
	}
	if !ok {
		return c.result("down", fmt.Sprintf("GET %s answered %s; %s is expected", h.Path, resp.Status, want))
	}
	return c.result("up", fmt.Sprintf("GET %s answered %s in %d ms", h.Path, resp.Status, took.Milliseconds()))
}

func (c *Checker) result(state, msg string) Result {
	return Result{State: state, Message: msg, CheckedAt: c.now()}
}

// failure says why a check got no answer, and what it means for the
// target.
func failure(err error, port int, machine string, localPort int, timeout time.Duration) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("nothing listens on tunnel port %d: %s's tunnel client is not connected or has not opened this target yet", port, machine)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Sprintf("no answer within %s", timeout)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || isClosed(err):
		return fmt.Sprintf("the connection closed before an answer: nothing answers on port %d of %s (its tunnel is up)", localPort, machine)
	}
	return err.Error()
}

func isClosed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && strings.Contains(op.Err.Error(), "closed")
}
