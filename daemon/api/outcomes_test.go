package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/logstream"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// TestInstallOutcomeKept: a failed install's cause is stored, shown by the
// status with what to do about a missing systemd, and still there for a
// daemon started afresh on the same database.
func TestInstallOutcomeKept(t *testing.T) {
	e := newLocalEnv(t, nil)
	e.units.startErr = units.ErrUnavailable
	srv := httptest.NewServer(checkedHandler(t, e.srv))
	defer srv.Close()
	ws, _, err := dialLogs(t, srv, e.cookie, "")
	if err != nil {
		t.Fatal(err)
	}
	if st := e.status(t); len(st.Outcomes) != 0 {
		t.Fatalf("outcomes before any operation: %+v", st.Outcomes)
	}
	if r := e.do(req{method: "POST", path: "/api/local/install", body: `{"skip_webproxy":true,"server_host":"203.0.113.9"}`, cookie: e.cookie}); r.Code != 200 {
		t.Fatalf("install: %d %s", r.Code, r.Body)
	}
	if _, ok := readUntilDone(t, ws); ok {
		t.Fatal("install succeeded without systemd")
	}
	want := "starting revtunnel-server.service: systemd is not available: " + units.UnavailableHint
	got := e.status(t).Outcomes["install"]
	if got.OK || got.Message != want || got.At.IsZero() {
		t.Fatalf("install outcome = %+v, want failed with %q", got, want)
	}
	// A new daemon on the same database (new hub, nothing in memory), on a
	// machine without systemd.
	again := &localEnv{testEnv: newEnvDeps(t, e.db, e.cfg.DataDir, nil, app.Deps{Units: units.Unavailable{}}), cookie: e.cookie}
	if got2 := again.status(t).Outcomes["install"]; got2.Message != want || got2.OK {
		t.Fatalf("after a restart the outcome is %+v", got2)
	}
	// The unit states say the same.
	if u := again.status(t).Units["caddy"]; u.Error != "systemd is not available: "+units.UnavailableHint {
		t.Fatalf("caddy unit = %+v", u)
	}
}

// TestStateEventsPushed: dashboards on the log WebSocket hear which
// resource changed, without any background operation running.
func TestStateEventsPushed(t *testing.T) {
	e := newMachinesEnv(t, wide)
	hub := e.app.Hub
	srv := httptest.NewServer(checkedHandler(t, e.srv))
	defer srv.Close()
	// A client that does not ask for events gets none: it sees only the
	// line it is waiting for.
	plain, _, err := dialLogs(t, srv, e.cookie, "")
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/api/local/logs/ws?events=1",
		http.Header{"Cookie": {SessionCookie + "=" + e.cookie}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	next := func(want ...string) {
		t.Helper()
		seen := map[string]bool{}
		ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		for len(seen) < len(want) {
			var m logstream.Message
			if err := ws.ReadJSON(&m); err != nil {
				t.Fatalf("waiting for %v (got %v): %v", want, seen, err)
			}
			if m.Event == "" {
				t.Fatalf("non-event message %+v", m)
			}
			for _, w := range want {
				if m.Event == w {
					seen[w] = true
				}
			}
		}
	}
	tok := e.token(t)
	next("tokens", "audit")
	e.data(t, e.bootstrap(t, tok, "pi"), 200)
	next("machines", "activity")
	// A failed join is listed on the Machines page: it is announced too.
	wantError(t, e.bootstrap(t, tok, "cam"), 401, "invalid or expired token")
	next("tokens")
	e.data(t, e.do(req{method: "POST", path: "/api/tunnels", body: `{"machine_id":1,"name":"db","kind":"tcp","local_port":5432}`, cookie: e.cookie}), 201)
	next("tunnels", "activity")
	e.data(t, e.do(req{method: "PATCH", path: "/api/machines/1", body: `{"name":"nas"}`, cookie: e.cookie}), 200)
	next("machines")
	op, err := hub.Begin("install")
	if err != nil {
		t.Fatal(err)
	}
	op.Line("info", "only line")
	plain.SetReadDeadline(time.Now().Add(10 * time.Second))
	var m logstream.Message
	if err := plain.ReadJSON(&m); err != nil || m.Line != "only line" || m.Event != "" {
		t.Fatalf("client without events got %+v, %v", m, err)
	}
	op.Done(true)
}

// TestFirewallOutcomeKept: firewall changes, made at once or in the
// background, are stored with their result, failure included, for the
// status page.
func TestFirewallOutcomeKept(t *testing.T) {
	nft := &switchRunner{}
	dir := t.TempDir()
	e := newEnvDeps(t, newTestDB(t, sqliteEngine, dir), dir, nil, app.Deps{Units: units.Unavailable{}, HostTools: nft})
	setup := e.app.Setup
	cookie := e.setup()
	status := func() map[string]any {
		r := e.do(req{method: "GET", path: "/api/local/status", cookie: cookie})
		if r.Code != 200 {
			t.Fatalf("status: %d %s", r.Code, r.Body)
		}
		o, _ := r.json(t)["data"].(map[string]any)["outcomes"].(map[string]any)["firewall"].(map[string]any)
		return o
	}
	wantMessage(t, e.do(req{method: "POST", path: "/api/local/firewall/configure", cookie: cookie, body: `{"mode":"manual"}`}), "firewall mode set to manual")
	if o := status(); o["ok"] != true || o["message"] != "firewall mode set to manual" || o["at"] == nil {
		t.Fatalf("outcome = %v", o)
	}
	// svc, in the background, with an nft that accepts everything.
	_, ch, cancel := setup.Hub.Subscribe()
	defer cancel()
	wantMessage(t, e.do(req{method: "POST", path: "/api/local/firewall/configure", cookie: cookie, body: `{"mode":"svc"}`}), "firewall takeover started; its progress shows on the Overview")
	deadline := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case m := <-ch:
			done = m.Done
		case <-deadline:
			t.Fatal("the takeover did not end")
		}
	}
	if o := status(); o["ok"] != true {
		t.Fatalf("outcome after svc = %v", o)
	}
	// Leaving svc needs nft, which now fails: the failure is what is kept.
	nft.fail.Store(true)
	r := e.do(req{method: "POST", path: "/api/local/firewall/configure", cookie: cookie, body: `{"mode":"none"}`})
	if r.Code != 500 {
		t.Fatalf("leaving svc with a failing nft: %d %s", r.Code, r.Body)
	}
	msg := r.json(t)["error"].(string)
	if o := status(); o["ok"] != false || o["message"] != msg || msg == "" {
		t.Fatalf("outcome = %v, want failed with %q", o, msg)
	}
}

// switchRunner runs every command as `true` (success) or, once fail is
// set, as `false`.
type switchRunner struct{ fail atomic.Bool }

func (r *switchRunner) Run(ctx context.Context, name string, args ...string) cmdrun.Result {
	prefix := "true"
	if r.fail.Load() {
		prefix = "false"
	}
	return cmdrun.Exec{Prefix: []string{prefix}}.Run(ctx, name, args...)
}
