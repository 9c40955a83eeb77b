package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/bundle"
	"github.com/tunnelsvc/tunnelsvc/daemon/fleet"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

const token = "Zm9yLXRlc3RzLW9ubHktYWdlbnQtdG9rZW4tb2YtbTc"

// ports maps machine ids to the ports their agents listen on.
type ports map[int64]int

func (p ports) Agent(_ context.Context, id int64) (machines.AgentAccess, error) {
	return machines.AgentAccess{Port: p[id], Token: token}, nil
}
func (ports) SetAgentOutdated(context.Context, int64, bool) error { return nil }
func (ports) ClientConfig(context.Context, int64, string) (string, error) {
	return "", nil
}

// lines collects progress lines.
type lines struct {
	mu sync.Mutex
	l  []string
}

func (p *lines) Line(level, text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.l = append(p.l, level+": "+text)
}

func (p *lines) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.l, "\n")
}

type env struct {
	st     *store.Store
	u      *fleet.Updater
	agents map[int64]*testutil.UpdatingAgent
	static string
	base   string
}

// newEnv: a store with one machine per agent (named m1, m2...), each agent
// on its own port, the server's bundle at version "2.0.0" served over HTTP
// as the daemon serves it.
func newEnv(t *testing.T, as ...*testutil.UpdatingAgent) *env {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	static := t.TempDir()
	os.MkdirAll(filepath.Join(static, "agents"), 0o755)
	os.MkdirAll(filepath.Join(static, "revtunnel"), 0o755)
	os.WriteFile(filepath.Join(static, "VERSION"), []byte("2.0.0\n"), 0o644)
	for _, arch := range bundle.Arches {
		os.WriteFile(filepath.Join(static, "agents", "tunnel-agent-linux-"+arch), []byte("agent"), 0o755)
		os.WriteFile(filepath.Join(static, "revtunnel", "revtunnel-client-linux-"+arch), []byte("client"), 0o755)
	}
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, arch := range bundle.Arches {
			if r.URL.Path == "/static/bundles/"+bundle.FileName(arch) {
				b, _ := bundle.Build(static, arch)
				w.Write(b.Data)
				return
			}
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(files.Close)
	e := &env{st: st, agents: map[int64]*testutil.UpdatingAgent{}, static: static, base: files.URL}
	ps := ports{}
	for i, a := range as {
		m, err := st.RegisterMachine(ctx, store.NewMachine{Name: fmt.Sprintf("m%d", i+1), Username: "pi", SecretHash: fmt.Sprint("s", i), AgentTokenHash: fmt.Sprint("a", i),
			Seal: func(int64) (string, error) { return "sealed", nil }, Now: time.Now(), Ports: store.PortRange{Lo: 30000, Hi: 30100}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(a)
		t.Cleanup(srv.Close)
		_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
		ps[m.ID], _ = strconv.Atoi(p)
		e.agents[m.ID] = a
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	client := &agentclient.Client{Machines: ps, Host: "127.0.0.1", HTTP: &http.Client{Timeout: 2 * time.Second}}
	e.u = &fleet.Updater{Store: st, Agents: client, StaticDir: static, Log: log,
		BaseURL: func(context.Context) (string, error) { return files.URL, nil },
		Audit:   &audit.Recorder{Store: st, Log: log, Now: time.Now},
		Poll:    20 * time.Millisecond, ComeBack: 700 * time.Millisecond}
	return e
}

func agentAt(version string) *testutil.UpdatingAgent {
	a := testutil.NewUpdatingAgent(token, version)
	a.Download = true
	a.Restart = 100 * time.Millisecond
	return a
}

func (e *env) machine(t *testing.T, id int64) store.Machine {
	t.Helper()
	m, err := e.st.GetMachine(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (e *env) auditKinds(t *testing.T) string {
	t.Helper()
	rows, err := e.st.ListAudit(context.Background(), 50)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := len(rows) - 1; i >= 0; i-- {
		out = append(out, rows[i].Kind+" "+rows[i].Detail)
	}
	return strings.Join(out, "\n")
}

func TestUpdateOne(t *testing.T) {
	e := newEnv(t, agentAt("1.0.0"))
	var p lines
	if err := e.u.Update(context.Background(), 1, "2.0.0", &p); err != nil {
		t.Fatalf("update: %v\n%s", err, p.String())
	}
	m := e.machine(t, 1)
	if m.Update.State != fleet.StateCurrent || m.Update.Target != "2.0.0" || m.Report.AgentVersion != "2.0.0" || m.Report.BundleVersion != "2.0.0" || m.Report.ClientVersion != "0.61.1" || m.Report.Arch != "amd64" {
		t.Fatalf("stored: %+v %+v", m.Update, m.Report)
	}
	if got := strings.Join(e.agents[1].Calls(), ","); got != "update 2.0.0,confirm 2.0.0" {
		t.Fatalf("the agent was asked %q", got)
	}
	if got := e.auditKinds(t); got != `MACHINE_UPDATED machine "m1": bundle 1.0.0 → 2.0.0` {
		t.Fatalf("audit: %q", got)
	}
	for _, want := range []string{"m1: bundle 1.0.0 → 2.0.0 (linux-amd64", "m1: runs 2.0.0; update confirmed"} {
		if !strings.Contains(p.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, p.String())
		}
	}
}

func TestUpdateOutcomes(t *testing.T) {
	cases := []struct {
		name      string
		set       func(*testutil.UpdatingAgent)
		state     string
		err       string
		auditKind string
	}{
		{"helper refuses", func(a *testutil.UpdatingAgent) {
			a.Outcome = testutil.Fails
			a.FailWith = "apply-update: /usr/local/bin is read-only"
		},
			fleet.StateFailed, "apply-update: /usr/local/bin is read-only", fleet.AuditFailed},
		{"rolled back", func(a *testutil.UpdatingAgent) { a.Outcome = testutil.RollsBack },
			fleet.StateRolledBack, "the new agent (2.0.0) did not check in within 60 s; bundle 1.0.0 was restored", fleet.AuditRolledBack},
		{"never comes back", func(a *testutil.UpdatingAgent) { a.Outcome = testutil.Hangs },
			fleet.StateFailed, "the machine did not come back within 700ms", fleet.AuditFailed},
		{"unsupported", func(a *testutil.UpdatingAgent) { a.Capable = false },
			fleet.StateUnsupported, "cannot take an update", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := agentAt("1.0.0")
			c.set(a)
			e := newEnv(t, a)
			err := e.u.Update(context.Background(), 1, "2.0.0", &lines{})
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("err %v, want %q", err, c.err)
			}
			m := e.machine(t, 1)
			if m.Update.State != c.state || !strings.Contains(m.Update.Error, c.err) || m.Update.Target != "2.0.0" {
				t.Fatalf("stored %+v", m.Update)
			}
			if got := e.auditKinds(t); (c.auditKind == "") != (got == "") || !strings.HasPrefix(got, c.auditKind) {
				t.Fatalf("audit %q, want %s", got, c.auditKind)
			}
		})
	}
}

// A bundle that changed on the server between the manifest and the download
// is refused by the agent, in its words, and nothing changes.
func TestUpdateChecksumMismatch(t *testing.T) {
	a := agentAt("1.0.0")
	e := newEnv(t, a)
	u := &fleet.Updater{Store: e.st, Agents: e.u.Agents, StaticDir: e.static, Poll: e.u.Poll, ComeBack: e.u.ComeBack}
	u.BaseURL = func(context.Context) (string, error) {
		// A server whose bundle is other bytes than the manifest says.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := bundle.Build(e.static, "amd64")
			data := append([]byte{}, b.Data...)
			data[len(data)-1] ^= 1
			w.Write(data)
		}))
		t.Cleanup(srv.Close)
		return srv.URL, nil
	}
	err := u.Update(context.Background(), 1, "2.0.0", &lines{})
	if err == nil || !strings.Contains(err.Error(), "bundle refused: SHA-256 mismatch") {
		t.Fatalf("err %v", err)
	}
	if a.Version() != "1.0.0" {
		t.Fatalf("the machine changed: %s", a.Version())
	}
}

// rollouts is edge's runner of rollouts over e's store, with the lease
// taken at the time now gives.
func (e *env) rollouts(edge string, now func() time.Time) *fleet.Rollouts {
	return &fleet.Rollouts{Updater: e.u, Store: e.st, Edge: edge, Log: e.u.Log,
		Lease: func(ctx context.Context) int64 {
			f, _ := e.st.LeaseFence(ctx, fleet.LeaseName, edge, fleet.LeaseTTL, now())
			return f
		}}
}

// run starts p on r and runs r until the rollout ends.
func (e *env) run(t *testing.T, r *fleet.Rollouts, p *fleet.Plan) fleet.Summary {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if p != nil {
		if err := r.Start(ctx, *p); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := r.Last(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Running && s.FinishedAt != nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rollout did not end: %+v", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func lineTexts(s fleet.Summary) string {
	var b strings.Builder
	for _, l := range s.Lines {
		fmt.Fprintf(&b, "%s: %s\n", l.Level, l.Text)
	}
	return b.String()
}

// Three machines, the second fails: the canary is updated, the third is
// never touched, and the summary says so.
func TestFleetStopsAtFirstFailure(t *testing.T) {
	bad := agentAt("1.0.0")
	bad.Outcome, bad.FailWith = testutil.Fails, "no space left on device"
	e := newEnv(t, agentAt("1.0.0"), bad, agentAt("1.0.0"))
	s := e.run(t, e.rollouts("edge-a", time.Now), &fleet.Plan{IDs: []int64{1, 2, 3}, Batch: 1, Target: "2.0.0", Base: e.base})
	if s.Running || fmt.Sprint(s.MachineIDs) != "[1 2 3]" || fmt.Sprint(s.Updated) != "[1]" || fmt.Sprint(s.Untouched) != "[3]" ||
		s.Failed == nil || s.Failed.MachineID != 2 || s.Failed.Name != "m2" || s.Failed.Reason != "no space left on device" ||
		s.StartedAt == nil || s.FinishedAt == nil || s.Edge != "edge-a" {
		t.Fatalf("summary %+v", s)
	}
	if calls := e.agents[3].Calls(); len(calls) != 0 || e.machine(t, 3).Update.State != "" {
		t.Fatalf("the third machine was touched: %v %+v", calls, e.machine(t, 3).Update)
	}
	if e.machine(t, 1).Update.State != fleet.StateCurrent || e.machine(t, 2).Update.State != fleet.StateFailed {
		t.Fatalf("states: %+v %+v", e.machine(t, 1).Update, e.machine(t, 2).Update)
	}
	if !strings.Contains(lineTexts(s), `error: stopped: machine "m2": no space left on device; 1 machine(s) left untouched`) {
		t.Fatalf("progress:\n%s", lineTexts(s))
	}
}

func TestFleetBatches(t *testing.T) {
	e := newEnv(t, agentAt("1.0.0"), agentAt("1.0.0"), agentAt("1.0.0"), agentAt("1.5.0"))
	s := e.run(t, e.rollouts("edge-a", time.Now), &fleet.Plan{IDs: []int64{1, 2, 3, 4}, Batch: 2, Target: "2.0.0", Base: e.base})
	if fmt.Sprint(s.Updated) != "[1 2 3 4]" || len(s.Untouched) != 0 || s.Failed != nil {
		t.Fatalf("summary %+v", s)
	}
	for _, want := range []string{"canary: machine #1 first", "batch 1 of 2: 2 machine(s)", "batch 2 of 2: 1 machine(s)", "4 machine(s) updated to 2.0.0"} {
		if !strings.Contains(lineTexts(s), want) {
			t.Errorf("progress lacks %q:\n%s", want, lineTexts(s))
		}
	}
}

func TestLastBeforeAnyFleetUpdate(t *testing.T) {
	e := newEnv(t)
	s, err := e.rollouts("edge-a", time.Now).Last(context.Background())
	if err != nil || s.Running || s.Failed != nil || s.StartedAt != nil || s.MachineIDs == nil || s.Updated == nil || s.Untouched == nil || s.Lines == nil {
		t.Fatalf("%+v %v", s, err)
	}
}

// Only one rollout runs at a time, whichever edge is asked.
func TestOneRolloutAtATime(t *testing.T) {
	e := newEnv(t, agentAt("1.0.0"))
	ctx := context.Background()
	if err := e.rollouts("edge-a", time.Now).Start(ctx, fleet.Plan{IDs: []int64{1}, Target: "2.0.0", Base: e.base}); err != nil {
		t.Fatal(err)
	}
	err := e.rollouts("edge-b", time.Now).Start(ctx, fleet.Plan{IDs: []int64{1}, Target: "2.0.0", Base: e.base})
	if !errors.Is(err, store.ErrRolloutRunning) {
		t.Fatalf("a second rollout: %v", err)
	}
}

// Edge a started a rollout and died with machine 2 in flight (its agent
// already restarted into the target): once a's lease expired, edge b
// takes it up, confirms machine 2, updates machine 3, and a's late
// writes change nothing.
func TestRolloutResumesOnAnotherEdge(t *testing.T) {
	e := newEnv(t, agentAt("2.0.0"), agentAt("2.0.0"), agentAt("1.0.0"))
	ctx := context.Background()
	past := func() time.Time { return time.Now().Add(-time.Hour) }
	a := e.rollouts("edge-a", past)
	if err := a.Start(ctx, fleet.Plan{IDs: []int64{1, 2, 3}, Batch: 2, Target: "2.0.0", Base: e.base}); err != nil {
		t.Fatal(err)
	}
	ro, err := e.st.RunningRollout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fenceA := a.Lease(ctx)
	if err := e.st.ClaimRollout(ctx, ro.ID, "edge-a", fenceA); err != nil {
		t.Fatal(err)
	}
	ro.Edge, ro.Fence, ro.Updated, ro.Started = "edge-a", fenceA, []int64{1}, 3
	if err := e.st.SaveRollout(ctx, ro); err != nil {
		t.Fatal(err)
	}

	s := e.run(t, e.rollouts("edge-b", time.Now), nil)
	if fmt.Sprint(s.Updated) != "[1 2 3]" || s.Failed != nil || s.Edge != "edge-b" || len(s.Untouched) != 0 {
		t.Fatalf("summary %+v", s)
	}
	for _, want := range []string{"edge edge-b takes up this fleet update where it stopped", "m2: runs 2.0.0 already", "m2: runs 2.0.0; update confirmed",
		"m3: runs 2.0.0; update confirmed", "3 machine(s) updated to 2.0.0"} {
		if !strings.Contains(lineTexts(s), want) {
			t.Errorf("progress lacks %q:\n%s", want, lineTexts(s))
		}
	}
	if e.agents[3].Version() != "2.0.0" {
		t.Fatalf("m3 runs %s", e.agents[3].Version())
	}
	// Edge a wakes up and writes what it knew: refused, nothing changes.
	ro.State, ro.Updated = store.RolloutFailed, nil
	if err := e.st.SaveRollout(ctx, ro); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a stale write: %v", err)
	}
	if err := e.st.ClaimRollout(ctx, ro.ID, "edge-a", fenceA); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a stale claim: %v", err)
	}
	if after, _ := e.rollouts("edge-b", time.Now).Last(ctx); fmt.Sprint(after.Updated) != "[1 2 3]" || after.Running {
		t.Fatalf("after the stale write: %+v", after)
	}
}
