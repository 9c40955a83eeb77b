package api

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/fleet"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// updateEnv: the daemon as Serve builds it (edge "edge-a", its fleet
// updates running), machines registered through the API, each with an
// update-capable agent at the given version listening on the machine's
// agent port, where frps would forward the daemon's requests to it; the
// server's bundle at 2.0.0.
func updateEnv(t *testing.T, engine string, versions ...string) (*machinesEnv, *fleet.Updater, []*testutil.UpdatingAgent) {
	static := t.TempDir()
	os.MkdirAll(filepath.Join(static, "agents"), 0o755)
	os.MkdirAll(filepath.Join(static, "revtunnel"), 0o755)
	os.WriteFile(filepath.Join(static, "VERSION"), []byte("2.0.0\n"), 0o644)
	os.WriteFile(filepath.Join(static, "agents", "tunnel-agent-linux-amd64"), []byte("agent"), 0o755)
	os.WriteFile(filepath.Join(static, "revtunnel", "revtunnel-client-linux-amd64"), []byte("client"), 0o755)
	lo := testutil.TunnelPorts(t)
	e := newMachinesEnvWith(t, engine, store.PortRange{Lo: lo, Hi: lo + 199}, func(c *config.Config) {
		c.StaticDir, c.BaseURL, c.EdgeName = static, "http://vps.example", "edge-a"
	})
	var agents []*testutil.UpdatingAgent
	for i, v := range versions {
		r := e.bootstrap(t, e.token(t), "m"+strconv.Itoa(i+1))
		reg := e.data(t, r, 200)
		// Machines are numbered from 1 in the order they join.
		m := e.data(t, e.do(req{method: "GET", path: fmt.Sprintf("/api/machines/%d", i+1), cookie: e.cookie}), 200)
		a := testutil.NewUpdatingAgent(reg["agent_token"].(string), v)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%v", m["agent_port"]))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(a)
		srv.Listener.Close()
		srv.Listener = l
		srv.Start()
		t.Cleanup(srv.Close)
		agents = append(agents, a)
		// Its tunnel client is connected (an update needs that).
		if err := e.st.SetMachineStatus(context.Background(), int64(i+1), "online", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	u := e.app.Fleet
	u.Poll, u.ComeBack = 20*time.Millisecond, 2*time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.app.Rollouts.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return e, u, agents
}

func (e *machinesEnv) waitUpdate(t *testing.T, id int64, state string) store.Machine {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, err := e.st.GetMachine(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if m.Update.State == state {
			if _, running := e.srv.hub.Running(); !running {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("machine %d: update %+v, want %s", id, m.Update, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *machinesEnv) auditOf(t *testing.T, kind string) []string {
	t.Helper()
	rows, err := e.st.ListAudit(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		if r.Kind == kind {
			out = append(out, r.Detail)
		}
	}
	return out
}

func TestMachineUpdateAndDowngrade(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e, _, agents := updateEnv(t, engine, "1.0.0", "3.0.0")
		// Before any status was read: versions unknown (not "outdated": nothing
		// says so), and an update can go to it.
		m := e.data(t, e.do(req{method: "GET", path: "/api/machines/1", cookie: e.cookie}), 200)
		if up := m["update"].(map[string]any); m["agent_version"] != "" || up["state"] != "unknown" || up["target_version"] != "2.0.0" || up["can_update"] != true {
			t.Fatalf("unknown versions: %v %v", m["agent_version"], m["update"])
		}
		// Reading the agent's status records what it reports.
		e.data(t, e.do(req{method: "GET", path: "/api/machines/2/agent/status", cookie: e.cookie}), 200)
		m = e.data(t, e.do(req{method: "GET", path: "/api/machines/2", cookie: e.cookie}), 200)
		if m["agent_version"] != "3.0.0" || m["bundle_version"] != "3.0.0" || m["client_version"] != "0.61.1" || m["update"].(map[string]any)["state"] != "outdated" {
			t.Fatalf("after the status: %v", m)
		}

		r := e.do(req{method: "POST", path: "/api/machines/1/update", cookie: e.cookie})
		if d := e.data(t, r, 202); d["message"] != `updating machine "m1" to bundle 2.0.0: its state shows how it goes` {
			t.Fatalf("message %v", d["message"])
		}
		e.waitUpdate(t, 1, "current")
		m = e.data(t, e.do(req{method: "GET", path: "/api/machines/1", cookie: e.cookie}), 200)
		if up := m["update"].(map[string]any); up["state"] != "current" || m["bundle_version"] != "2.0.0" || up["at"] == nil {
			t.Fatalf("after the update: %v", m)
		}
		if got := e.auditOf(t, fleet.AuditStarted); len(got) != 1 || got[0] != `machine "m1": bundle (unknown) → 2.0.0` {
			t.Fatalf("started audit: %q", got)
		}
		if got := e.auditOf(t, fleet.AuditUpdated); len(got) != 1 || got[0] != `machine "m1": bundle 1.0.0 → 2.0.0` {
			t.Fatalf("updated audit: %q", got)
		}

		// m2 runs a newer bundle: refused, then allowed with the version named.
		wantError(t, e.do(req{method: "POST", path: "/api/machines/2/update", cookie: e.cookie}), 409,
			`machine "m2" runs bundle 3.0.0, newer than this server's 2.0.0; to go back to 2.0.0, send {"version": "2.0.0"}`)
		wantError(t, e.do(req{method: "POST", path: "/api/machines/2/update", body: `{"version":"2.5.0"}`, cookie: e.cookie}), 409,
			"this server's bundle is 2.0.0, not 2.5.0: machines can only be updated to it")
		if len(agents[1].Calls()) != 0 {
			t.Fatalf("a refused update reached the agent: %v", agents[1].Calls())
		}
		e.data(t, e.do(req{method: "POST", path: "/api/machines/2/update", body: `{"version":"2.0.0"}`, cookie: e.cookie}), 202)
		e.waitUpdate(t, 2, "current")
		if agents[1].Version() != "2.0.0" {
			t.Fatalf("m2 runs %s", agents[1].Version())
		}

		wantError(t, e.do(req{method: "POST", path: "/api/machines/9/update", cookie: e.cookie}), 404, "machine not found")
		wantError(t, e.do(req{method: "POST", path: "/api/machines/1/update", body: `{`, cookie: e.cookie}), 400, "invalid request body")
	})
}

// TestUpdateFromAnUnorderedBundle: a machine whose bundle a build before
// ordered versions named by a bare commit hash is updated, one by one and
// with "all", not refused as a downgrade because its hash's digits (6260)
// exceed the server's version's (2).
func TestUpdateFromAnUnorderedBundle(t *testing.T) {
	e, _, agents := updateEnv(t, sqliteEngine, "6260dd4", "6260dd4")
	for i := range agents {
		e.data(t, e.do(req{method: "GET", path: fmt.Sprintf("/api/machines/%d/agent/status", i+1), cookie: e.cookie}), 200)
	}
	e.data(t, e.do(req{method: "POST", path: "/api/machines/1/update", cookie: e.cookie}), 202)
	e.waitUpdate(t, 1, "current")
	e.data(t, e.do(req{method: "POST", path: "/api/machines/update", body: `{"all":true}`, cookie: e.cookie}), 202)
	e.waitUpdate(t, 2, "current")
	if agents[0].Version() != "2.0.0" || agents[1].Version() != "2.0.0" {
		t.Fatalf("agents at %s and %s, want 2.0.0", agents[0].Version(), agents[1].Version())
	}
}

func TestMachineUpdateUnsupported(t *testing.T) {
	e, _, agents := updateEnv(t, sqliteEngine, "1.0.0")
	agents[0].Capable = false
	e.data(t, e.do(req{method: "GET", path: "/api/machines/1/agent/status", cookie: e.cookie}), 200)
	m := e.data(t, e.do(req{method: "GET", path: "/api/machines/1", cookie: e.cookie}), 200)
	// The one line that rejoins it, through the address machines join at.
	line := "curl -fsSL http://vps.example/static/bootstrap.sh | sudo bash -s -- --rejoin"
	if up := m["update"].(map[string]any); up["state"] != "unsupported" || up["rejoin_command"] != line {
		t.Fatalf("update %v", up)
	}
	ms := e.list(t, "/api/machines")
	if up := ms[0].(map[string]any)["update"].(map[string]any); up["rejoin_command"] != line {
		t.Fatalf("the list's update %v", up)
	}
	r := e.do(req{method: "POST", path: "/api/machines/1/update", cookie: e.cookie})
	wantError(t, r, 409, `machine "m1" cannot take an update (its agent predates fleet updates); run this on it: `+line)
}

func TestFleetUpdateRoutes(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e, _, agents := updateEnv(t, engine, "1.0.0", "1.0.0", "1.0.0")
		agents[1].Outcome, agents[1].FailWith = testutil.Fails, "apply-update: no space left on device"
		// Before any fleet update.
		s := e.data(t, e.do(req{method: "GET", path: "/api/machines/update", cookie: e.cookie}), 200)
		if s["running"] != false || s["failed"] != nil || len(s["machine_ids"].([]any)) != 0 {
			t.Fatalf("empty summary: %v", s)
		}
		for _, c := range []struct{ body, want string }{
			{`{}`, "give machine_ids (a list of machine ids) or all: true"},
			{`{"all":true,"machine_ids":[1]}`, "give machine_ids or all, not both"},
			{`{"all":true,"batch":0}`, "batch must be between 1 and 50"},
			{`{"all":true,"batch":51}`, "batch must be between 1 and 50"},
		} {
			wantError(t, e.do(req{method: "POST", path: "/api/machines/update", body: c.body, cookie: e.cookie}), 400, c.want)
		}
		wantError(t, e.do(req{method: "POST", path: "/api/machines/update", body: `{"machine_ids":[1,7]}`, cookie: e.cookie}), 404, "machine 7 not found")

		d := e.data(t, e.do(req{method: "POST", path: "/api/machines/update", body: `{"machine_ids":[1,2,3],"batch":1}`, cookie: e.cookie}), 202)
		if d["message"] != "updating 3 machine(s) to bundle 2.0.0: one first, then 1 at a time" {
			t.Fatalf("message %v", d["message"])
		}
		deadline := time.Now().Add(5 * time.Second)
		for s = e.data(t, e.do(req{method: "GET", path: "/api/machines/update", cookie: e.cookie}), 200); s["running"] != false || s["finished_at"] == nil; {
			if time.Now().After(deadline) {
				t.Fatalf("the fleet update did not end: %v", s)
			}
			time.Sleep(10 * time.Millisecond)
			s = e.data(t, e.do(req{method: "GET", path: "/api/machines/update", cookie: e.cookie}), 200)
		}
		failed, _ := s["failed"].(map[string]any)
		if s["running"] != false || len(s["updated"].([]any)) != 1 || len(s["untouched"].([]any)) != 1 || s["untouched"].([]any)[0] != float64(3) ||
			failed == nil || failed["name"] != "m2" || failed["error"] != "apply-update: no space left on device" || s["edge"] != "edge-a" {
			t.Fatalf("summary %v", s)
		}
		// Its log is in the summary, the same on every edge.
		ls := s["lines"].([]any)
		if last := ls[len(ls)-1].(map[string]any); last["level"] != "error" ||
			last["text"] != `stopped: machine "m2": apply-update: no space left on device; 1 machine(s) left untouched` {
			t.Fatalf("last line %v", last)
		}
		if len(agents[2].Calls()) != 0 {
			t.Fatalf("the third machine was touched: %v", agents[2].Calls())
		}
		m := e.data(t, e.do(req{method: "GET", path: "/api/machines/2", cookie: e.cookie}), 200)
		if up := m["update"].(map[string]any); up["state"] != "failed" || up["error"] != "apply-update: no space left on device" {
			t.Fatalf("m2: %v", up)
		}
		if got := e.auditOf(t, fleet.AuditStarted); len(got) != 1 || !strings.Contains(got[0], `fleet update of 3 machine(s), batches of 1: "m1" (unknown) → 2.0.0`) {
			t.Fatalf("started audit: %q", got)
		}
		if got := e.auditOf(t, fleet.AuditFailed); len(got) != 1 || got[0] != `machine "m2": bundle 1.0.0 → 2.0.0 failed: apply-update: no space left on device` {
			t.Fatalf("failed audit: %q", got)
		}
	})
}

// A fleet update of thousands names the first machines in its audit line
// and counts the rest, so the line stays readable.
func TestAuditNamesTheFirstMachines(t *testing.T) {
	var what []string
	for i := 1; i <= 25; i++ {
		what = append(what, fmt.Sprintf("%q", fmt.Sprintf("m%d", i)))
	}
	got := firstOf(what, auditNames)
	if !strings.HasPrefix(got, `"m1", "m2", `) || !strings.HasSuffix(got, `"m20" and 5 more`) || strings.Contains(got, `"m21"`) {
		t.Errorf("25 machines: %s", got)
	}
	if got := firstOf(what[:3], auditNames); got != `"m1", "m2", "m3"` {
		t.Errorf("3 machines: %s", got)
	}
}
