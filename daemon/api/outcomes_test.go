package api

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/logstream"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// TestInstallOutcomeKept: a failed install's cause is stored, shown by the
// status with what to do about a missing systemd, and still there for a
// daemon started afresh on the same database.
func TestInstallOutcomeKept(t *testing.T) {
	e := newLocalEnv(t, nil)
	e.setup.Hub.OnDone = e.setup.RecordOperation
	e.units.startErr = units.ErrUnavailable
	srv := httptest.NewServer(e.srv)
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
	// A new daemon on the same database (new hub, nothing in memory).
	e.setup = &localsetup.Service{Settings: localsetup.Settings{Store: e.st}, Units: e.units, Hub: logstream.NewHub(nil), Run: e.setup.Run, Log: e.setup.Log, Now: time.Now}
	e.srv = New(Options{Config: e.cfg, Auth: e.authSvc, Audit: e.srv.audit, Log: e.srv.log, Setup: e.setup, Hub: e.setup.Hub})
	if got2 := e.status(t).Outcomes["install"]; got2.Message != want || got2.OK {
		t.Fatalf("after a restart the outcome is %+v", got2)
	}
	// The unit states say the same.
	e.setup.Units = units.Unavailable{}
	if u := e.status(t).Units["caddy"]; u.Error != "systemd is not available: "+units.UnavailableHint {
		t.Fatalf("caddy unit = %+v", u)
	}
}

// TestStateEventsPushed: dashboards on the log WebSocket hear which
// resource changed, without any background operation running.
func TestStateEventsPushed(t *testing.T) {
	e := newMachinesEnv(t, wide)
	hub := logstream.NewHub(nil)
	e.st.OnChange(hub.Notify)
	e.srv = New(Options{Config: e.cfg, Auth: e.authSvc, Audit: e.srv.audit, Log: e.srv.log, Now: e.srv.now, Machines: e.svc, Hub: hub})
	srv := httptest.NewServer(e.srv)
	defer srv.Close()
	ws, _, err := dialLogs(t, srv, e.cookie, "")
	if err != nil {
		t.Fatal(err)
	}
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
	e.data(t, e.do(req{method: "POST", path: "/api/tunnels", body: `{"machine_id":1,"name":"db","kind":"tcp","local_port":5432}`, cookie: e.cookie}), 201)
	next("tunnels", "activity")
	e.data(t, e.do(req{method: "PATCH", path: "/api/machines/1", body: `{"name":"nas"}`, cookie: e.cookie}), 200)
	next("machines")
}
