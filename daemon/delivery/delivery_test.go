package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/delivery"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// configs renders "serverAddr = '<server>'" plus the tunnels of the store.
type configs struct {
	st     *store.Store
	mu     sync.Mutex
	server string
	extra  string // a line rendered after the server's
}

func (c *configs) DesiredConfig(ctx context.Context, m store.Machine) (string, string, error) {
	c.mu.Lock()
	server, extra := c.server, c.extra
	c.mu.Unlock()
	ts, err := c.st.ListTunnels(ctx, m.ID)
	if err != nil {
		return "", "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "serverAddr = '%s'\n%s", server, extra)
	for _, t := range ts {
		fmt.Fprintf(&b, "[[proxies]] # %s %d\n", t.Name, t.LocalPort)
	}
	return b.String(), server, nil
}

// agents is machines' agents: each answers or is down, and says what it got.
type agents struct {
	mu       sync.Mutex
	down     map[int64]bool
	got      map[int64][]string
	restarts map[int64]int
	tries    map[int64]int
}

func newAgents() *agents {
	return &agents{down: map[int64]bool{}, got: map[int64][]string{}, restarts: map[int64]int{}, tries: map[int64]int{}}
}

func (a *agents) PutConfig(_ context.Context, id int64, cfg string, gen int64) (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tries[id]++
	if a.down[id] {
		return 0, &agentclient.UnreachableError{MachineID: id, Err: errors.New("connection refused")}
	}
	if g, ok := agent.Generation([]byte(cfg)); !ok || g != gen {
		return 0, fmt.Errorf("config without its generation line %d:\n%s", gen, cfg)
	}
	a.got[id] = append(a.got[id], cfg)
	return gen, nil
}

func (a *agents) RestartTunnel(_ context.Context, id int64) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.restarts[id]++
	return "restarted", nil
}

func (a *agents) set(id int64, down bool) {
	a.mu.Lock()
	a.down[id] = down
	a.mu.Unlock()
}

func (a *agents) state(id int64) (got []string, restarts, tries int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.got[id]...), a.restarts[id], a.tries[id]
}

type rig struct {
	t    *testing.T
	st   *store.Store
	clk  *clock
	cfg  *configs
	ag   *agents
	rec  *delivery.Reconciler
	logs *logBuf
}

// logBuf holds what the reconciler logged, at every level.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }

// count is how many lines logged hold s.
func (l *logBuf) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func newRig(t *testing.T) *rig {
	return newRigWith(t, "vps.example.com", func(c *configs, a *agents) (delivery.Configs, delivery.Agents) { return c, a })
}

// newRigWith is newRig with the reconciler given what wrap makes of the
// rig's configs and agents (which may add edges).
func newRigWith(t *testing.T, server string, wrap func(*configs, *agents) (delivery.Configs, delivery.Agents)) *rig {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := &rig{t: t, st: st, clk: &clock{now: time.Unix(1_800_000_000, 0)}, cfg: &configs{st: st, server: server}, ag: newAgents(), logs: &logBuf{}}
	cfgs, ags := wrap(r.cfg, r.ag)
	r.rec = delivery.New(delivery.Options{Store: st, Configs: cfgs, Agents: ags, Now: r.clk.Now,
		Log: slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	st.OnChange(r.rec.Changed)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.rec.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// machine registers a machine whose registration config is applied.
func (r *rig) machine(name string) store.Machine {
	r.t.Helper()
	ctx := context.Background()
	r.cfg.mu.Lock()
	server := r.cfg.server
	r.cfg.mu.Unlock()
	// What DesiredConfig renders for a machine without tunnels, recorded
	// as the registration does: generation 1, applied.
	m, err := r.st.RegisterMachine(ctx, store.NewMachine{Name: name, Username: "pi", SecretHash: name + "s", AgentTokenHash: name + "a",
		Seal: func(int64) (string, error) { return "sealed", nil }, Now: r.clk.Now(), Ports: store.PortRange{Lo: 30000, Hi: 30100},
		Config: func(store.Machine) (string, string, error) {
			return machines.ConfigDigest(fmt.Sprintf("serverAddr = '%s'\n", server)), server, nil
		}})
	if err != nil {
		r.t.Fatal(err)
	}
	if c := r.config(m.ID); c.DesiredGen != 1 || c.AppliedGen != 1 || !c.PendingSince.IsZero() {
		r.t.Fatalf("after registration: desired %d, applied %d, pending since %v; want generation 1 applied", c.DesiredGen, c.AppliedGen, c.PendingSince)
	}
	return m
}

func (r *rig) tunnel(m store.Machine, name string) {
	r.t.Helper()
	_, err := r.st.InsertTunnel(context.Background(), store.Tunnel{MachineID: m.ID, Name: name, Kind: "tcp", LocalPort: 8080},
		store.PortRange{Lo: 31000, Hi: 31100}, r.clk.Now())
	if err != nil {
		r.t.Fatal(err)
	}
}

// wait polls cond for up to 10 s.
func (r *rig) wait(what string, cond func() error) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("%s: still %v after 10 s", what, err)
}

func (r *rig) config(id int64) store.ConfigState {
	m, err := r.st.GetMachine(context.Background(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	return m.Config
}

func (r *rig) applied(id, gen int64) func() error {
	return func() error {
		c := r.config(id)
		if c.AppliedGen != gen || c.DesiredGen != gen || !c.PendingSince.IsZero() {
			return fmt.Errorf("desired %d, applied %d, pending since %v", c.DesiredGen, c.AppliedGen, c.PendingSince)
		}
		return nil
	}
}

func TestReadBackoff(t *testing.T) {
	want := []time.Duration{250, 500, 1000, 2000, 4000, 4000}
	for i, w := range want {
		if got := delivery.ReadBackoff(i + 1); got != w*time.Millisecond {
			t.Errorf("after %d failed reads: %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
}

// While the store fails (a database that is down), the machines are read
// again with backoff, not at every change or tick, and the operator is
// warned at the first failure and then every 30 s, not at each try.
func TestStoreDownIsRetriedWithBackoff(t *testing.T) {
	r := newRig(t)
	r.machine("nas")
	r.wait("the first pass", func() error {
		if r.logs.count("reading the machines failed") > 0 {
			return errors.New("a read failed with the store up")
		}
		return nil
	})
	r.st.Close()
	const failed, warned, still = "reading the machines failed", "could not read the machines; trying again with backoff", "still cannot read the machines"
	tries := func(n int) func() error {
		return func() error {
			if got := r.logs.count(failed); got != n {
				return fmt.Errorf("%d failed reads, want %d", got, n)
			}
			return nil
		}
	}
	r.rec.Changed("tunnels")
	r.wait("the first failed read", tries(1))
	// Changes while the clock stands still: each wakes the reconciler,
	// none is a new try before the backoff has passed.
	for i := 0; i < 20; i++ {
		r.rec.Changed("tunnels")
		time.Sleep(10 * time.Millisecond)
	}
	if err := tries(1)(); err != nil {
		t.Fatalf("within the first backoff: %v\n%s", err, r.logs.b.String())
	}
	for n, step := range []time.Duration{250, 500, 1000, 2000, 4000, 4000} {
		r.clk.Add(step * time.Millisecond)
		r.wait(fmt.Sprintf("try %d after %v", n+2, step*time.Millisecond), tries(n+2))
	}
	if w, s := r.logs.count(warned), r.logs.count(still); w != 1 || s != 0 {
		t.Fatalf("after 7 tries in under 30 s: %d first warnings, %d later ones; want 1 and 0", w, s)
	}
	r.clk.Add(delivery.ReadWarnEvery)
	r.wait("the warning 30 s later", func() error {
		if n := r.logs.count(still); n != 1 {
			return fmt.Errorf("%d later warnings", n)
		}
		return nil
	})
}

func TestBackoff(t *testing.T) {
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	for i, w := range want {
		if got := delivery.Backoff(i + 1); got != w*time.Second {
			t.Errorf("after %d failures: %v, want %v", i+1, got, w*time.Second)
		}
	}
}

// A tunnel created right after the join reaches the machine: the desired
// generation rises and the agent gets the new config.
func TestTunnelChangeIsDelivered(t *testing.T) {
	r := newRig(t)
	m := r.machine("nas")
	r.tunnel(m, "web")
	r.wait("generation 2 applied", r.applied(m.ID, 2))
	got, restarts, _ := r.ag.state(m.ID)
	if len(got) != 1 || !strings.HasPrefix(got[0], "# tunnelsvc config generation: 2\n") || !strings.Contains(got[0], "web 8080") {
		t.Fatalf("the agent got %q", got)
	}
	if restarts != 0 {
		t.Fatalf("a config with the same server address restarted the client %d times", restarts)
	}
}

// An agent that is down misses nothing: deliveries go on with backoff,
// the machine shows why in words, and a Ping of the machine delivers at once
// once the agent answers, whatever the backoff.
func TestUnreachableAgentIsRetriedUntilApplied(t *testing.T) {
	r := newRig(t)
	m := r.machine("nas")
	r.ag.set(m.ID, true)
	r.tunnel(m, "db")
	r.wait("first failure recorded", func() error {
		got, err := r.st.GetMachine(context.Background(), m.ID)
		if err != nil || got.ConfigPush == nil || got.ConfigPush.OK {
			return fmt.Errorf("push %+v %v", got.ConfigPush, err)
		}
		if !strings.Contains(got.ConfigPush.Message, "does not answer") {
			return fmt.Errorf("message not in words: %q", got.ConfigPush.Message)
		}
		return nil
	})
	// Time passes: the reconciler retries on its own, with backoff.
	// Time is moved at each look, not once: the reconciler may set its
	// next try only after the failure is on record, and a clock moved
	// before that would leave the next try in the future for good.
	for i := 0; i < 4; i++ {
		_, _, before := r.ag.state(m.ID)
		r.wait("another try", func() error {
			r.clk.Add(delivery.MaxBackoff)
			if _, _, n := r.ag.state(m.ID); n <= before {
				return fmt.Errorf("%d tries", n)
			}
			return nil
		})
	}
	c := r.config(m.ID)
	if c.AppliedGen != 1 || c.DesiredGen != 2 || c.PendingSince.IsZero() {
		t.Fatalf("while the agent is down: %+v", c)
	}
	// The agent is back; the next backoff is a minute away, but the
	// machine pings: delivered now.
	r.ag.set(m.ID, false)
	r.rec.Nudge(m.ID)
	r.wait("generation 2 applied after the nudge", r.applied(m.ID, 2))
	got, _ := r.st.GetMachine(context.Background(), m.ID)
	if got.ConfigPush == nil || !got.ConfigPush.OK {
		t.Fatalf("the failure still shows: %+v", got.ConfigPush)
	}
}

// A new server address reaches every machine, and their tunnel clients
// restart onto it (frpc's reload does not apply it).
func TestServerAddressChangeRestartsClients(t *testing.T) {
	r := newRig(t)
	a, b := r.machine("a"), r.machine("b")
	r.cfg.mu.Lock()
	r.cfg.server = "router.new.example"
	r.cfg.mu.Unlock()
	r.rec.Changed(store.TopicSettings)
	for _, m := range []store.Machine{a, b} {
		r.wait(m.Name+": generation 2 applied", r.applied(m.ID, 2))
		got, restarts, _ := r.ag.state(m.ID)
		if restarts != 1 || !strings.Contains(got[len(got)-1], "router.new.example") {
			t.Fatalf("%s: restarts %d, got %q", m.Name, restarts, got)
		}
		if s := r.config(m.ID).AppliedServer; s != "router.new.example" {
			t.Fatalf("%s: applied server %q", m.Name, s)
		}
	}
}

// duringAgents runs during (once) while the first delivery is in flight.
type duringAgents struct {
	*agents
	once   sync.Once
	during atomic.Pointer[func(id int64)]
}

func (d *duringAgents) PutConfig(ctx context.Context, id int64, cfg string, gen int64) (int64, error) {
	if f := d.during.Load(); f != nil {
		d.once.Do(func() { (*f)(id) })
	}
	return d.agents.PutConfig(ctx, id, cfg, gen)
}

// A machine whose desired config rises while a delivery to it runs (its
// agent's status, answered during the delivery, names a new tunnel client,
// which changes the config it should run) gets the new generation as soon
// as that delivery ends, not at the next full pass. The clock stands
// still here, so a full pass never comes.
func TestDesiredDuringADeliveryIsDeliveredNext(t *testing.T) {
	var ag duringAgents
	r := newRigWith(t, "vps.example.com", func(c *configs, a *agents) (delivery.Configs, delivery.Agents) {
		ag.agents = a
		return c, &ag
	})
	m := r.machine("nas")
	render := func(line string) {
		r.cfg.mu.Lock()
		r.cfg.extra = line
		r.cfg.mu.Unlock()
	}
	f := func(id int64) {
		render("# wire protocol v2\n")
		if err := r.rec.Desire(context.Background(), id); err != nil {
			t.Error(err)
		}
	}
	ag.during.Store(&f)
	// What the rejoin of a machine asks for: its config rendered and
	// delivered now (no change is announced, so no pass reads it again).
	render("# rejoined\n")
	if err := r.rec.Desire(context.Background(), m.ID); err != nil {
		t.Fatal(err)
	}
	r.wait("generation 3 applied", r.applied(m.ID, 3))
	got, _, _ := r.ag.state(m.ID)
	if len(got) != 2 || !strings.Contains(got[0], "# rejoined") || !strings.Contains(got[1], "# wire protocol v2") {
		t.Fatalf("the agent got %q", got)
	}
}

// Nothing is delivered to a machine that runs what it should.
func TestInStepMachineIsLeftAlone(t *testing.T) {
	r := newRig(t)
	m := r.machine("nas")
	r.rec.Changed(store.TopicTunnels)
	other := r.machine("other")
	r.tunnel(other, "web")
	r.wait("other applied", r.applied(other.ID, 2))
	if got, _, tries := r.ag.state(m.ID); tries != 0 {
		t.Fatalf("an in-step machine got %d deliveries: %q", tries, got)
	}
}

// While a machine's tunnel client is connected, a failed delivery is tried
// again within OnlineMaxBackoff however long it has failed, so its agent,
// once back, gets the config within seconds.
func TestOnlineMachineIsRetriedWithinSeconds(t *testing.T) {
	r := newRig(t)
	m := r.machine("nas")
	if err := r.st.SetMachineStatus(context.Background(), m.ID, "online", r.clk.Now()); err != nil {
		t.Fatal(err)
	}
	r.ag.set(m.ID, true)
	r.tunnel(m, "db")
	for i := 0; i < 8; i++ { // past the 32 s backoff of an offline machine
		// The last try has ended (its backoff counts from its end), so
		// the clock moves past the whole backoff.
		r.wait("the last try ends", func() error {
			if n := r.rec.InFlight(); n > 0 {
				return fmt.Errorf("%d deliveries running", n)
			}
			return nil
		})
		_, _, before := r.ag.state(m.ID)
		r.clk.Add(delivery.OnlineMaxBackoff)
		r.wait(fmt.Sprintf("try %d within %v of the last", i+2, delivery.OnlineMaxBackoff), func() error {
			if _, _, n := r.ag.state(m.ID); n <= before {
				return fmt.Errorf("%d tries", n)
			}
			return nil
		})
	}
	// As in the loop: the last try has ended before the clock moves (a
	// try that ends after it counts its backoff from the moved clock, and
	// the next one would never come).
	r.wait("the last try ends", func() error {
		if n := r.rec.InFlight(); n > 0 {
			return fmt.Errorf("%d deliveries running", n)
		}
		return nil
	})
	r.ag.set(m.ID, false)
	r.clk.Add(delivery.OnlineMaxBackoff)
	r.wait("generation 2 applied", r.applied(m.ID, 2))
}

// slowConfigs is configs whose every render takes cost on the rig's clock.
type slowConfigs struct {
	*configs
	renders *atomic.Int64
	cost    func(m store.Machine)
}

func (s slowConfigs) DesiredConfig(ctx context.Context, m store.Machine) (string, string, error) {
	s.renders.Add(1)
	s.cost(m)
	return s.configs.DesiredConfig(ctx, m)
}

// slowRig is a rig whose renders each take 100 ms of its clock (counted in
// renders). during holds a func run once, at the next render of machine
// hookOn (store a new one to run it again). The rig's log is shown when
// the test fails.
func slowRig(t *testing.T, renders *atomic.Int64, hookOn string) (r *rig, during *atomic.Value) {
	during = new(atomic.Value)
	during.Store(func() {})
	r = newRigWith(t, "vps.example.com", func(c *configs, a *agents) (delivery.Configs, delivery.Agents) {
		return slowConfigs{configs: c, renders: renders, cost: func(m store.Machine) {
			r.clk.Add(100 * time.Millisecond)
			if m.Name == hookOn {
				f := during.Swap(func() {}).(func())
				f()
			}
		}}, a
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(r.logs.b.String())
		}
	})
	return r, during
}

// Changes that come faster than passes end (a fleet joining, a script
// making tunnels: one comes while a pass runs) do not render every machine
// back to back: the next pass starts PassPace×d after the last began,
// where d is how long it took. A change on a quiet daemon is rendered at
// once, and nothing is lost: a paced change is rendered when due.
func TestPassesArePacedUnderAStreamOfChanges(t *testing.T) {
	var renders atomic.Int64
	r, during := slowRig(t, &renders, "c")
	clk := r.clk
	ms := []store.Machine{r.machine("a"), r.machine("b"), r.machine("c")}
	// A pass renders the three machines: 300 ms on the rig's clock. The
	// clock moves on a minute: whatever the passes before took, one is
	// due (and the rig's clock moves only when told).
	r.tunnel(ms[0], "web")
	clk.Add(time.Minute)
	r.wait("a's tunnel applied", r.applied(ms[0].ID, 2))
	// A change on a quiet daemon: rendered at once, the clock standing.
	r.tunnel(ms[1], "db")
	r.wait("b's tunnel applied at once", r.applied(ms[1].ID, 2))
	// A change while a pass runs (made as the pass renders c, after a):
	// the next pass is paced.
	during.Store(func() { r.tunnel(ms[0], "api") })
	r.tunnel(ms[2], "cache")
	r.wait("c's tunnel applied", r.applied(ms[2].ID, 2))
	before := renders.Load()
	time.Sleep(600 * time.Millisecond)
	// (A delivery may still render its machine once more: not a pass.)
	if n := renders.Load() - before; n >= int64(len(ms)) {
		t.Fatalf("%d renders right after a pass during which a change came: a pass of every machine, want it paced", n)
	}
	if c := r.config(ms[0].ID); c.DesiredGen != 2 {
		t.Fatalf("a's desired generation is %d before the paced pass", c.DesiredGen)
	}
	// Well past PassPace times any pass here, and short of FullPass.
	clk.Add(10 * time.Second)
	r.wait("a's second tunnel applied once the pass was due", r.applied(ms[0].ID, 3))
}

// A change that comes while the periodic pass runs (FullPass went by, no
// change asked for it) is no stream of changes: it is rendered as soon as
// that pass ends, not PassPace times a whole pass later.
func TestAChangeDuringThePeriodicPassIsNotPaced(t *testing.T) {
	r, during := slowRig(t, new(atomic.Int64), "b")
	clk := r.clk
	ms := []store.Machine{r.machine("a"), r.machine("b")}
	r.tunnel(ms[0], "web")
	clk.Add(time.Minute)
	r.wait("a's tunnel applied", r.applied(ms[0].ID, 2))
	// The periodic pass, with a change to a made as it renders b (after
	// a); the clock then stands: a paced pass would never come.
	during.Store(func() { r.tunnel(ms[0], "db") })
	clk.Add(delivery.FullPass)
	r.wait("a's second tunnel applied right after the periodic pass", r.applied(ms[0].ID, 3))
}
