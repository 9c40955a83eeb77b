package api

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/banner"
	"github.com/tunnelsvc/tunnelsvc/daemon/banner/bannertest"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/logstream"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// progressLog records background operations as the log WebSocket would see
// them.
type progressLog struct {
	mu    sync.Mutex
	lines []string
	done  chan bool
}

func newProgressLog() *progressLog { return &progressLog{done: make(chan bool, 4)} }

// follow collects the lines and outcomes of the operations on hub (the
// daemon's log stream), until the test ends.
func (p *progressLog) follow(t testing.TB, hub *logstream.Hub) {
	_, ch, cancel := hub.Subscribe()
	t.Cleanup(cancel)
	go func() {
		for m := range ch {
			if m.Line != "" {
				opProgress{p, m.Op}.Line(m.Level, m.Line)
			}
			if m.Done && m.OK != nil {
				p.done <- *m.OK
			}
		}
	}()
}

func (p *progressLog) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

func (p *progressLog) wait(t *testing.T) bool {
	t.Helper()
	select {
	case ok := <-p.done:
		return ok
	case <-time.After(30 * time.Second):
		t.Fatalf("background operation did not finish:\n%s", p.text())
		return false
	}
}

type opProgress struct {
	p  *progressLog
	op string
}

func (o opProgress) Line(level, text string) {
	o.p.mu.Lock()
	defer o.p.mu.Unlock()
	o.p.lines = append(o.p.lines, o.op+" "+level+": "+text)
}

func dataOf(t *testing.T, r resp) map[string]any {
	t.Helper()
	d, ok := r.json(t)["data"].(map[string]any)
	if !ok {
		t.Fatalf("no data object: %s", r.Body)
	}
	return d
}

func wantMessage(t *testing.T, r resp, msg string) {
	t.Helper()
	if r.Code != 200 {
		t.Fatalf("status %d, want 200: %s", r.Code, r.Body)
	}
	if got := dataOf(t, r)["message"]; got != msg {
		t.Fatalf("message %q, want %q", got, msg)
	}
}

func bannedIn(t *testing.T, e *testEnv, cookie, jail string) []string {
	t.Helper()
	r := e.do(req{method: "GET", path: "/api/security/banner", cookie: cookie})
	if r.Code != 200 {
		t.Fatalf("status: %d %s", r.Code, r.Body)
	}
	for _, j := range dataOf(t, r)["jails"].([]any) {
		jm := j.(map[string]any)
		if jm["name"] == jail {
			var out []string
			for _, ip := range jm["banned"].([]any) {
				out = append(out, ip.(string))
			}
			return out
		}
	}
	t.Fatalf("jail %s not in status: %s", jail, r.Body)
	return nil
}

// TestBannerAPIWithRealFail2ban: setup-banner through the API against a
// private fail2ban-server, then bans, unban, whitelist and config as a user
// of the dashboard sees them.
func TestBannerAPIWithRealFail2ban(t *testing.T) {
	in := bannertest.New(t)
	plog := newProgressLog()
	e := newEnv(t, func(o *Options, st *store.Store) {
		bo := in.Options()
		bo.Store = st
		o.Banner = banner.New(bo)
		plog.follow(t, o.Hub)
	})
	cookie := e.setup()

	// Before setup: installed, not running, defaults.
	r := e.do(req{method: "GET", path: "/api/security/banner", cookie: cookie})
	if d := dataOf(t, r); r.Code != 200 || d["installed"] != true || d["running"] != false || d["managed"] != false {
		t.Fatalf("%d %s", r.Code, r.Body)
	}
	r = e.do(req{method: "GET", path: "/api/security/banner/config", cookie: cookie})
	if strings.TrimSpace(r.Body.String()) != `{"data":{"max_retry":5,"find_time":600,"ban_time":3600}}` {
		t.Fatalf("default config: %s", r.Body)
	}
	wantMessage(t, e.do(req{method: "PUT", path: "/api/security/banner/config", cookie: cookie, body: `{"max_retry":3,"find_time":600,"ban_time":600}`}), "ban tool config saved")
	wantMessage(t, e.do(req{method: "POST", path: "/api/security/banner/whitelist", cookie: cookie, body: `{"ip":"198.51.100.0/24"}`}), "added 198.51.100.0/24 to the whitelist")

	wantMessage(t, e.do(req{method: "POST", path: "/api/local/setup-banner", cookie: cookie}), "ban tool set-up started; its progress shows on the Overview")
	if !plog.wait(t) {
		t.Fatalf("setup failed:\n%s", plog.text())
	}
	if !strings.Contains(plog.text(), "setup-banner info: fail2ban is running with jails: sshd, tunnelsvc-auth") {
		t.Fatalf("progress:\n%s", plog.text())
	}
	if got := in.Get(banner.AuthJail, "maxretry"); got != "3" {
		t.Fatalf("maxretry %s", got)
	}

	in.AuthFailures("198.51.100.20", 4) // whitelisted
	in.AuthFailures("203.0.113.9", 3)
	if !bannertest.WaitFor(10*time.Second, func() bool { return slices.Contains(bannedIn(t, e, cookie, banner.AuthJail), "203.0.113.9") }) {
		t.Fatalf("not banned: %v", bannedIn(t, e, cookie, banner.AuthJail))
	}
	if b := bannedIn(t, e, cookie, banner.AuthJail); !slices.Equal(b, []string{"203.0.113.9"}) {
		t.Fatalf("banned %v; the whitelisted address must never be", b)
	}

	// Unban: bad input first, then the real thing, then fail2ban's refusal.
	for _, c := range []struct{ body, msg string }{
		{`{"jail":"tunnelsvc-auth"}`, "jail and ip are required"},
		{`{"ip":"203.0.113.9"}`, "jail and ip are required"},
		{`{"jail":" ","ip":" "}`, "jail and ip are required"},
		{`{"jail":"tunnelsvc-auth","ip":"203.0.113.999"}`, `invalid ip "203.0.113.999"`},
		{`{"jail":"-x","ip":"203.0.113.9"}`, `invalid jail name "-x"`},
		{`{"jail":`, "invalid request body"},
	} {
		wantError(t, e.do(req{method: "POST", path: "/api/security/banner/unban", cookie: cookie, body: c.body}), 400, c.msg)
	}
	if b := in.Banned(banner.AuthJail); len(b) != 1 {
		t.Fatalf("bad unban requests changed bans: %v", b)
	}
	wantMessage(t, e.do(req{method: "POST", path: "/api/security/banner/unban", cookie: cookie, body: `{"jail":"tunnelsvc-auth","ip":"203.0.113.9"}`}), "unbanned 203.0.113.9 in tunnelsvc-auth")
	if b := in.Banned(banner.AuthJail); len(b) != 0 {
		t.Fatalf("still banned: %v", b)
	}
	wantError(t, e.do(req{method: "POST", path: "/api/security/banner/unban", cookie: cookie, body: `{"jail":"nojail","ip":"203.0.113.9"}`}),
		500, "unban failed: Sorry but the jail 'nojail' does not exist")
	wantError(t, e.do(req{method: "POST", path: "/api/security/banner/unban", cookie: cookie, body: `{"jail":"sshd","ip":"203.0.113.9"}`}),
		500, "unban failed: 203.0.113.9 is not banned in sshd")

	// Config: bad values change nothing; a good one reaches fail2ban.
	for _, c := range []struct{ body, msg string }{
		{`{"max_retry":0,"find_time":600,"ban_time":600}`, "max_retry must be between 1 and 1000"},
		{`{"max_retry":3,"find_time":9,"ban_time":600}`, "find_time must be between 10 and 315360000 seconds"},
		{`{"max_retry":3,"find_time":600,"ban_time":9}`, "ban_time must be between 10 and 315360000 seconds"},
		{`{"max_retry":3}`, "find_time must be between 10 and 315360000 seconds"},
		{`{"max_retry":"3","find_time":600,"ban_time":600}`, "invalid request body"},
		{`{"max_retry":3.5,"find_time":600,"ban_time":600}`, "invalid request body"},
	} {
		wantError(t, e.do(req{method: "PUT", path: "/api/security/banner/config", cookie: cookie, body: c.body}), 400, c.msg)
	}
	if got := in.Get(banner.AuthJail, "maxretry"); got != "3" {
		t.Fatalf("rejected config reached fail2ban: maxretry %s", got)
	}
	wantMessage(t, e.do(req{method: "PUT", path: "/api/security/banner/config", cookie: cookie, body: `{"max_retry":8,"find_time":120,"ban_time":7200}`}), "ban tool config saved")
	if got := in.Get(banner.AuthJail, "maxretry"); got != "8" {
		t.Fatalf("maxretry after PUT: %s", got)
	}
	if got := in.Get(banner.SSHDJail, "bantime"); got != "7200" {
		t.Fatalf("sshd bantime after PUT: %s", got)
	}

	// Whitelist: validation, duplicates, delete by CIDR in the path.
	for _, c := range []struct{ body, msg string }{
		{`{}`, "ip is required"},
		{`{"ip":"  "}`, "ip is required"},
		{`{"ip":"not-an-ip"}`, `invalid ip "not-an-ip": expected an address such as 203.0.113.7 or a CIDR such as 203.0.113.0/24`},
		{`{"ip":"::/0"}`, "::/0 would whitelist every address"},
	} {
		wantError(t, e.do(req{method: "POST", path: "/api/security/banner/whitelist", cookie: cookie, body: c.body}), 400, c.msg)
	}
	wantMessage(t, e.do(req{method: "POST", path: "/api/security/banner/whitelist", cookie: cookie, body: `{"ip":"198.51.100.9/24"}`}), "198.51.100.0/24 is already in the whitelist")
	wantMessage(t, e.do(req{method: "POST", path: "/api/security/banner/whitelist", cookie: cookie, body: `{"ip":"2001:db8::1"}`}), "added 2001:db8::1 to the whitelist")
	if got := in.Get(banner.AuthJail, "ignoreip"); !strings.Contains(got, "2001:db8::1") {
		t.Fatalf("ignoreip %s", got)
	}
	wantError(t, e.do(req{method: "DELETE", path: "/api/security/banner/whitelist/", cookie: cookie}), 400, "ip is required")
	wantError(t, e.do(req{method: "DELETE", path: "/api/security/banner/whitelist", cookie: cookie}), 400, "ip is required")
	wantError(t, e.do(req{method: "DELETE", path: "/api/security/banner/whitelist/192.0.2.1", cookie: cookie}), 400, "192.0.2.1 is not in the whitelist")
	wantMessage(t, e.do(req{method: "DELETE", path: "/api/security/banner/whitelist/198.51.100.0%2F24", cookie: cookie}), "removed 198.51.100.0/24 from the whitelist")
	wantMessage(t, e.do(req{method: "DELETE", path: "/api/security/banner/whitelist/2001:db8::1", cookie: cookie}), "removed 2001:db8::1 from the whitelist")
	if got := in.Get(banner.AuthJail, "ignoreip"); strings.Contains(got, "198.51.100.0/24") || strings.Contains(got, "2001:db8::1") {
		t.Fatalf("ignoreip after deletes: %s", got)
	}
	r = e.do(req{method: "GET", path: "/api/security/banner", cookie: cookie})
	if d := dataOf(t, r); d["running"] != true || d["managed"] != true || len(d["whitelist"].([]any)) != 0 {
		t.Fatalf("final status %s", r.Body)
	}
}

// TestGuardRoutesNeedSession: every ban-tool and firewall route except
// detect is private.
func TestGuardRoutesNeedSession(t *testing.T) {
	e := newEnv(t)
	for _, rt := range []struct{ method, path string }{
		{"GET", "/api/security/banner"}, {"GET", "/api/security/banner/config"}, {"PUT", "/api/security/banner/config"},
		{"POST", "/api/security/banner/unban"}, {"POST", "/api/security/banner/whitelist"},
		{"DELETE", "/api/security/banner/whitelist/1.2.3.4"}, {"POST", "/api/local/setup-banner"},
		{"POST", "/api/local/firewall/configure"},
	} {
		wantError(t, e.do(req{method: rt.method, path: rt.path, body: `{}`}), 401, "authentication required")
	}
	r := e.do(req{method: "GET", path: "/api/local/firewall/detect"})
	if d := dataOf(t, r); r.Code != 200 || d["mode"] != "none" {
		t.Fatalf("detect without a session: %d %s", r.Code, r.Body)
	}
}

type noTools struct{}

func (noTools) Run(_ context.Context, name string, _ ...string) cmdrun.Result {
	return cmdrun.Result{Err: fmt.Errorf("%s: %w", name, cmdrun.ErrNotInstalled)}
}

// TestSetupBannerWithoutSystemd: the background operation reports why.
func TestSetupBannerWithoutSystemd(t *testing.T) {
	in := bannertest.New(t)
	plog := newProgressLog()
	var db *store.Store
	e := newEnv(t, func(o *Options, st *store.Store) {
		bo := in.Options()
		bo.Store, bo.Units = st, nil
		o.Banner = banner.New(bo)
		plog.follow(t, o.Hub)
		db = st
	})
	cookie := e.setup()
	wantMessage(t, e.do(req{method: "POST", path: "/api/local/setup-banner", cookie: cookie}), "ban tool set-up started; its progress shows on the Overview")
	if plog.wait(t) || !strings.Contains(plog.text(), "setup-banner error: ban tool setup failed: systemd is not available") {
		t.Fatalf("progress:\n%s", plog.text())
	}
	// The audit log says how it ended, and why, after "started".
	rows, err := db.ListAudit(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < 2 || rows[0].Kind != "BANNER_SETUP_FAILED" || !strings.HasPrefix(rows[0].Detail, "ban tool setup failed: systemd is not available: ") ||
		rows[1].Kind != "BANNER_SETUP_STARTED" {
		t.Fatalf("audit: %+v", rows[:min(len(rows), 3)])
	}
}

// TestFirewallConfigureAPI runs the firewall against a network namespace of
// its own: svc in the background with its log, manual synchronously. The
// dashboard's status reports each mode the firewall applied.
func TestFirewallConfigureAPI(t *testing.T) {
	for _, tool := range []string{"nft", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/install-deps.sh installs nftables and iproute2)", tool)
		}
	}
	ns := fmt.Sprintf("tsvc9-api-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	nft := func(args ...string) string {
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns, "nft"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("nft %v: %v %s", args, err, out)
		}
		return string(out)
	}
	// The daemon's nft runs in the namespace; its dashboard is on 7380, its
	// machines' ports from 10001.
	plog := newProgressLog()
	dir := t.TempDir()
	e := newEnvDeps(t, newTestDB(t, sqliteEngine, dir), dir, func(c *config.Config) { c.TunnelPortLo, c.TunnelPortHi = 10001, 10100 },
		app.Deps{Units: units.Unavailable{}, HostTools: cmdrun.Exec{Prefix: []string{"ip", "netns", "exec", ns}},
			Dashboard: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7380}})
	plog.follow(t, e.app.Hub)
	cookie := e.setup()
	// A private dashboard and a machine (its tunnel port): ports the svc
	// table closes.
	if r := e.do(req{method: "PUT", path: "/api/local/server-ports", body: `{"dashboard_private":true}`, cookie: cookie}); r.Code != 200 {
		t.Fatalf("server-ports: %d %s", r.Code, r.Body)
	}
	me := &machinesEnv{testEnv: e, svc: e.app.Machines, cookie: cookie}
	reg := me.data(t, me.bootstrap(t, me.token(t), "nas"), 200)
	port := fmt.Sprint(reg["tunnel_port"])
	statusMode := func() any {
		t.Helper()
		return dataOf(t, e.do(req{method: "GET", path: "/api/local/status", cookie: cookie}))["firewall_mode"]
	}
	if m := statusMode(); m != "none" {
		t.Fatalf("status firewall_mode before any choice = %v, want none", m)
	}
	for _, body := range []string{`{"mode":"ufw"}`, `{}`, `{"mode":"SVC"}`} {
		wantError(t, e.do(req{method: "POST", path: "/api/local/firewall/configure", cookie: cookie, body: body}), 400, "mode must be one of: svc, manual, none")
	}
	wantError(t, e.do(req{method: "POST", path: "/api/local/firewall/configure", cookie: cookie, body: `{"mode":`}), 400, "invalid request body")
	if tables := nft("list", "tables"); tables != "" {
		t.Fatalf("rejected requests changed nftables: %s", tables)
	}

	wantMessage(t, e.do(req{method: "POST", path: "/api/local/firewall/configure", cookie: cookie, body: `{"mode":"svc"}`}), "firewall takeover started; its progress shows on the Overview")
	if !plog.wait(t) {
		t.Fatalf("svc failed:\n%s", plog.text())
	}
	if !strings.Contains(plog.text(), "firewall info: firewall: nft -c accepted the ruleset") {
		t.Fatalf("progress:\n%s", plog.text())
	}
	table := nft("list", "table", "inet", "tunnelsvc")
	drop := regexp.MustCompile(`tcp dport \{ ([0-9, ]+) \} drop`).FindStringSubmatch(table)
	if drop == nil || !slices.Contains(strings.Split(drop[1], ", "), "7380") || !slices.Contains(strings.Split(drop[1], ", "), port) {
		t.Fatalf("svc table lacks the private ports:\n%s", table)
	}
	r := e.do(req{method: "GET", path: "/api/local/firewall/detect", cookie: cookie})
	d := dataOf(t, r)
	if d["mode"] != "svc" || d["nftables"].(map[string]any)["svc_table"] != true {
		t.Fatalf("detect: %s", r.Body)
	}
	if m := statusMode(); m != "svc" {
		t.Fatalf("status firewall_mode after svc was applied = %v, want svc", m)
	}
	wantMessage(t, e.do(req{method: "POST", path: "/api/local/firewall/configure", cookie: cookie, body: `{"mode":"manual"}`}), "firewall mode set to manual")
	if m := statusMode(); m != "manual" {
		t.Fatalf("status firewall_mode after manual = %v, want manual", m)
	}
	if tables := nft("list", "tables"); tables != "" {
		t.Fatalf("tables after manual: %s", tables)
	}
	wantMessage(t, e.do(req{method: "POST", path: "/api/local/firewall/configure", cookie: cookie, body: `{"mode":"none"}`}), "firewall mode set to none")
	if d := dataOf(t, e.do(req{method: "GET", path: "/api/local/firewall/detect", cookie: cookie})); d["mode"] != "none" {
		t.Fatalf("mode %v", d["mode"])
	}
}
