package api

import (
	"context"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// settingsEnv is newEnv with every settings route wired: the set-up
// settings, the firewall (nft always succeeds), the ban tool (not
// installed: its settings are only saved) and the monitoring settings;
// logged in.
type settingsEnv struct {
	*testEnv
	local  *localsetup.Service
	cookie string
}

func newSettingsEnv(t *testing.T) *settingsEnv {
	t.Helper()
	return newSettingsEnvOn(t, sqliteEngine)
}

// newSettingsEnvOn is newSettingsEnv on a store of the given engine.
func newSettingsEnvOn(t *testing.T, engine string) *settingsEnv {
	t.Helper()
	// A machine without systemd whose nft accepts every ruleset and has no
	// fail2ban.
	dir := t.TempDir()
	se := &settingsEnv{testEnv: newEnvDeps(t, newTestDB(t, engine, dir), dir, nil, app.Deps{Units: units.Unavailable{}, HostTools: settingsTools{}})}
	se.local = se.app.Setup
	se.cookie = se.setup()
	return se
}

// waitOperation waits until the background operation running now (the
// firewall takeover) has ended.
func (se *settingsEnv) waitOperation(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if op, _ := se.local.Hub.Running(); op == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the background operation did not end")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// auditRow is one audit entry as the tests compare it.
type auditRow struct{ Kind, Detail string }

// auditAfter returns the audit entries newer than id, oldest first, and
// the newest id.
func auditAfter(t *testing.T, e *testEnv, cookie string, id float64) ([]auditRow, float64) {
	t.Helper()
	r := e.do(req{method: "GET", path: "/api/security/logs", cookie: cookie})
	if r.Code != 200 {
		t.Fatalf("audit log: %d %s", r.Code, r.Body)
	}
	var rows []auditRow
	newest := id
	list, _ := r.json(t)["data"].([]any)
	for i := len(list) - 1; i >= 0; i-- {
		m := list[i].(map[string]any)
		n := m["id"].(float64)
		if n <= id {
			continue
		}
		rows = append(rows, auditRow{m["kind"].(string), m["detail"].(string)})
		newest = max(newest, n)
	}
	return rows, newest
}

// settingsTools stands in for the host's tools: nft takes every ruleset,
// and fail2ban is not installed.
type settingsTools struct{}

func (settingsTools) Run(ctx context.Context, name string, args ...string) cmdrun.Result {
	if name == "nft" || name == "sysctl" {
		return (&switchRunner{}).Run(ctx, name, args...)
	}
	return noTools{}.Run(ctx, name, args...)
}
