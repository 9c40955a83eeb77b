package api

import (
	"context"
	"sync"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// fakeUnits records calls and answers like systemd would for the
// allow-listed units, refusing others the way the real layer does.
type fakeUnits struct {
	mu      sync.Mutex
	calls   []string
	fail    error // returned by jobs when set
	started map[string]int
}

func (f *fakeUnits) job(op, name string) error {
	unit, err := units.Canonical(name)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, op+" "+unit)
	if f.fail != nil {
		return f.fail
	}
	if op == "start" || op == "restart" {
		if f.started == nil {
			f.started = map[string]int{}
		}
		f.started[unit]++
	}
	return nil
}

func (f *fakeUnits) Start(_ context.Context, n string) error   { return f.job("start", n) }
func (f *fakeUnits) Stop(_ context.Context, n string) error    { return f.job("stop", n) }
func (f *fakeUnits) Restart(_ context.Context, n string) error { return f.job("restart", n) }
func (f *fakeUnits) Reload(_ context.Context, n string) error  { return f.job("reload", n) }
func (f *fakeUnits) Enable(_ context.Context, n string) error  { return f.job("enable", n) }
func (f *fakeUnits) Disable(_ context.Context, n string) error { return f.job("disable", n) }
func (f *fakeUnits) State(_ context.Context, n string) (units.State, error) {
	unit, err := units.Canonical(n)
	if err != nil {
		return units.State{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st := units.State{Name: unit, LoadState: "loaded", ActiveState: "inactive", SubState: "dead"}
	if k := f.started[unit]; k > 0 {
		st.ActiveState, st.SubState, st.InvocationID = "active", "running", string(rune('a'+k))
	}
	return st, nil
}

func TestUnitsWithoutSystemd(t *testing.T) {
	// A dev box without systemd.
	dir := t.TempDir()
	e := newEnvDeps(t, newTestDB(t, sqliteEngine, dir), dir, nil, app.Deps{Units: units.Unavailable{}})
	tok := e.setup()
	for _, q := range []req{
		{method: "GET", path: "/api/units"},
		{method: "GET", path: "/api/units/caddy"},
		{method: "POST", path: "/api/units/revtunnel-server/restart"},
		{method: "POST", path: "/api/units/fail2ban.service/stop"},
	} {
		q.cookie = tok
		wantError(t, e.do(q), 503, "systemd is not available: "+units.UnavailableHint)
	}
	// The allow-list is checked first, systemd or not.
	wantError(t, e.do(req{method: "POST", path: "/api/units/ssh/restart", cookie: tok}), 400,
		`unit "ssh" is not managed by tunnelsvc (allowed: revtunnel-server, caddy, fail2ban)`)
}

func TestUnitsNeedSession(t *testing.T) {
	e := newEnv(t)
	e.setup()
	for _, q := range []req{
		{method: "GET", path: "/api/units"},
		{method: "POST", path: "/api/units/caddy/restart"},
	} {
		wantError(t, e.do(q), 401, "authentication required")
	}
	wantError(t, e.do(req{method: "GET", path: "/api/units/caddy/restart"}), 405, "method not allowed")
}

func TestUnitJobs(t *testing.T) {
	f := &fakeUnits{}
	dir := t.TempDir()
	e := newEnvDeps(t, newTestDB(t, sqliteEngine, dir), dir, nil, app.Deps{Units: f})
	tok := e.setup()

	r := e.do(req{method: "POST", path: "/api/units/caddy/restart", cookie: tok, peer: "192.0.2.8:1"})
	if r.Code != 200 {
		t.Fatalf("restart: %d %s", r.Code, r.Body)
	}
	// The audit log has it, with who asked.
	if es, _ := e.st.ListAudit(t.Context(), 1); len(es) != 1 || es[0].Kind != "UNIT_RESTART" || es[0].ClientAddr != "192.0.2.8" || es[0].Detail != "restart caddy.service: done" {
		t.Fatalf("audit = %+v", es)
	}
	data := r.json(t)["data"].(map[string]any)
	unit := data["unit"].(map[string]any)
	if data["message"] != "restart caddy.service: done" || unit["name"] != "caddy.service" || unit["active_state"] != "active" {
		t.Fatalf("restart answer: %s", r.Body)
	}

	r = e.do(req{method: "GET", path: "/api/units", cookie: tok})
	if r.Code != 200 {
		t.Fatalf("list: %d %s", r.Code, r.Body)
	}
	list := r.json(t)["data"].([]any)
	var names []string
	for _, u := range list {
		names = append(names, u.(map[string]any)["name"].(string))
	}
	if len(names) != 3 || names[0] != "revtunnel-server.service" || names[1] != "caddy.service" || names[2] != "fail2ban.service" {
		t.Fatalf("listed units %v", names)
	}

	for _, name := range []string{"sshd", "caddy.socket", "revtunnel-client", "dbus"} {
		wantError(t, e.do(req{method: "POST", path: "/api/units/" + name + "/stop", cookie: tok}), 400, "")
	}
	if len(f.calls) != 1 {
		t.Fatalf("refused names reached the unit layer: %v", f.calls)
	}

	f.fail = &units.JobError{Op: "reload", Unit: "fail2ban.service", Result: "failed"}
	wantError(t, e.do(req{method: "POST", path: "/api/units/fail2ban/reload", cookie: tok}), 500, "reload fail2ban.service: job failed")
}
