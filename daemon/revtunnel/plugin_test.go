package revtunnel_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// pluginRig is the plugin as the daemon wires it: a store on a data
// directory of its own, the machines service over it, and the plugin.
type pluginRig struct {
	dir    string
	svc    *machines.Service
	plugin *revtunnel.Plugin
}

func newPluginRig(tb testing.TB, ports store.PortRange) *pluginRig {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "data")
	st, err := store.Open(context.Background(), dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	sealer, _ := seal.LoadOrCreate(dir)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sp, _ := ssh.NewPublicKey(pub)
	svc := &machines.Service{Store: st, Sealer: sealer, Keys: keys{string(ssh.MarshalAuthorizedKey(sp))}, Log: log,
		Limiter: auth.NewLimiter(nil), Ports: ports, Reach: installedReach(tb, st, "127.0.0.1"), FRPSPort: 7000}
	return &pluginRig{dir: dir, svc: svc, plugin: &revtunnel.Plugin{Store: st, Log: log}}
}

// pluginMachine is a registered machine as frps presents it to the plugin:
// the user and secret of its login, and its tunnels.
type pluginMachine struct {
	id           int64
	user, secret string
	tunnels      []int64
}

// proxy is the name frps gives the machine's i-th tunnel.
func (m pluginMachine) proxy(i int) string { return m.user + "." + frpconf.TunnelProxy(m.tunnels[i]) }

// register bootstraps a machine named name with the given number of TCP
// tunnels.
func (r *pluginRig) register(tb testing.TB, name string, tunnels int) pluginMachine {
	tb.Helper()
	ctx := context.Background()
	tok, err := r.svc.CreateToken(ctx, time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	reg, err := r.svc.Bootstrap(ctx, machines.BootstrapRequest{Token: tok.Token, Name: name, Username: "pi", Client: netip.MustParseAddr("127.0.0.1")})
	if err != nil {
		tb.Fatal(err)
	}
	m := pluginMachine{id: reg.MachineID}
	m.user, m.secret = loginOf(reg.ClientConfig)
	for i := range tunnels {
		kind, tname, port := "tcp", fmt.Sprintf("t%d", i), 8000+i
		tun, err := r.svc.CreateTunnel(ctx, machines.TunnelInput{MachineID: &reg.MachineID, Name: &tname, Kind: &kind, LocalPort: &port})
		if err != nil {
			tb.Fatal(err)
		}
		m.tunnels = append(m.tunnels, tun.ID)
	}
	return m
}

// loginOf reads the user and the secret a rendered frpc config logs in with.
func loginOf(clientConfig string) (user, secret string) {
	return regexp.MustCompile(`(?m)^user = '([^']+)'`).FindStringSubmatch(clientConfig)[1],
		regexp.MustCompile(`(?m)^token = '([^']+)'`).FindStringSubmatch(clientConfig)[1]
}

// newUserConn is frps's NewUserConn call for user's connection to proxy,
// with the client's metadatas.
func newUserConn(user, proxy string, metas map[string]string) string {
	m, _ := json.Marshal(metas)
	return fmt.Sprintf(`{"version":"0.1.0","op":"NewUserConn","content":{"user":{"user":%q,"metas":%s},"proxy_name":%q,"proxy_type":"tcp","remote_addr":"127.0.0.1:40000"}}`,
		user, m, proxy)
}

// answer is the plugin's answer to body, which must be a 200.
func (r *pluginRig) answer(t *testing.T, body string) string {
	t.Helper()
	w := r.call(body)
	if w.Code != 200 {
		t.Fatalf("plugin: %d %s", w.Code, w.Body)
	}
	return strings.TrimSpace(w.Body.String())
}

// call posts body to the plugin as frps does and returns the answer.
func (r *pluginRig) call(body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", frpconf.PluginPath+"?op=NewUserConn", strings.NewReader(body))
	req.RemoteAddr = "127.0.0.1:5555"
	w := httptest.NewRecorder()
	r.plugin.ServeHTTP(w, req)
	return w
}

// TestNewUserConnAfterDelete: frps asks about every connection to a tunnel
// port. Once a tunnel or its machine is deleted, the very next connection is
// refused, even right after the same connection was let through, and also
// when the deletion is written by another process (here: another handle on
// the same database, as the admin commands open it).
func TestNewUserConnAfterDelete(t *testing.T) {
	ctx := context.Background()
	r := newPluginRig(t, store.PortRange{Lo: 20000, Hi: 20099})
	// allowed answers frps's call and reports whether the connection is let
	// through.
	allowed := func(m pluginMachine, proxy string) bool {
		t.Helper()
		w := r.call(newUserConn(m.user, proxy, map[string]string{"token": m.secret}))
		switch {
		case w.Code != 200:
			t.Fatalf("NewUserConn for %s: %d %s", proxy, w.Code, w.Body)
		case strings.Contains(w.Body.String(), `"reject":true`):
			return false
		case strings.Contains(w.Body.String(), `"reject":false`):
			return true
		}
		t.Fatalf("NewUserConn for %s: answer %s", proxy, w.Body)
		return false
	}

	a, b := r.register(t, "alpha", 2), r.register(t, "beta", 2)
	for i := 0; i < 3; i++ {
		for _, m := range []pluginMachine{a, b} {
			for j := range m.tunnels {
				if !allowed(m, m.proxy(j)) {
					t.Fatalf("connection to %s refused while its machine and tunnel exist", m.proxy(j))
				}
			}
		}
	}
	if allowed(a, b.proxy(0)) {
		t.Fatal("alpha's credential opened a connection to beta's tunnel")
	}

	// The tunnel deleted through the API's code path.
	if err := r.svc.DeleteTunnel(ctx, a.tunnels[0]); err != nil {
		t.Fatal(err)
	}
	if allowed(a, a.proxy(0)) {
		t.Fatal("a deleted tunnel was let through")
	}
	if !allowed(a, a.proxy(1)) {
		t.Fatal("the machine's other tunnel was refused")
	}

	// The machine deleted by another process.
	other, err := store.Open(ctx, r.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.DeleteMachine(ctx, b.id); err != nil {
		t.Fatal(err)
	}
	for j := range b.tunnels {
		if allowed(b, b.proxy(j)) {
			t.Fatalf("a connection to %s of a machine deleted by another process was let through", b.proxy(j))
		}
	}
	if !allowed(a, a.proxy(1)) {
		t.Fatal("another machine's tunnel was refused")
	}
}

// proxyCall is frps's NewProxy or CloseProxy call for user's tcp proxy on
// port.
func proxyCall(op, user, proxy string, port int, metas map[string]string) string {
	return proxyCallAs(op, user, proxy, "tcp", port, metas)
}

// proxyCallAs is proxyCall for a proxy of type typ.
func proxyCallAs(op, user, proxy, typ string, port int, metas map[string]string) string {
	m, _ := json.Marshal(metas)
	return fmt.Sprintf(`{"version":"0.1.0","op":%q,"content":{"user":{"user":%q,"metas":%s},"proxy_name":%q,"proxy_type":%q,"remote_port":%d}}`,
		op, user, m, proxy, typ, port)
}

// TestProxyTypeFollowsTheKind: a udp tunnel opens only as a udp proxy, a
// tcp tunnel and the ssh port only as tcp ones, and no other type at all.
func TestProxyTypeFollowsTheKind(t *testing.T) {
	ctx := context.Background()
	r := newPluginRig(t, store.PortRange{Lo: 20000, Hi: 20099})
	m := r.register(t, "alpha", 1)
	metas := map[string]string{"token": m.secret}
	kind, name, local := "udp", "game", 27015
	udp, err := r.svc.CreateTunnel(ctx, machines.TunnelInput{MachineID: &m.id, Name: &name, Kind: &kind, LocalPort: &local})
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := r.svc.Tunnel(ctx, m.tunnels[0])
	if err != nil {
		t.Fatal(err)
	}
	mach, err := r.svc.Store.GetMachine(ctx, m.id)
	if err != nil {
		t.Fatal(err)
	}
	udpProxy, sshProxy := m.user+"."+frpconf.TunnelProxy(udp.ID), m.user+"."+frpconf.ProxySSH
	const ok = `{"reject":false,"unchange":true}`
	refused := func(proxy, typ, why string) string {
		return fmt.Sprintf(`{"reject":true,"reject_reason":"proxy \"%s\": type \"%s\" is not allowed, %s","unchange":false}`, proxy, typ, why)
	}
	for _, c := range []struct {
		proxy, typ string
		port       int
		want       string
	}{
		{udpProxy, "udp", udp.RemotePort, ok},
		{udpProxy, "tcp", udp.RemotePort, refused(udpProxy, "tcp", "its tunnel is udp")},
		{m.proxy(0), "udp", tcp.RemotePort, refused(m.proxy(0), "udp", "its tunnel is tcp")},
		{sshProxy, "udp", mach.TunnelPort, refused(sshProxy, "udp", "its tunnel is tcp")},
		{m.proxy(0), "http", tcp.RemotePort, refused(m.proxy(0), "http", "only tcp and udp")},
	} {
		w := r.call(proxyCallAs("NewProxy", m.user, c.proxy, c.typ, c.port, metas))
		if got := strings.TrimSpace(w.Body.String()); w.Code != 200 || got != c.want {
			t.Errorf("NewProxy %s as %s: %d %s\nwant %s", c.proxy, c.typ, w.Code, got, c.want)
		}
	}
}

// TestPausedTunnelRefused: a paused tunnel's proxy is refused (NewProxy)
// and so is every new connection through it (NewUserConn), from the very
// next call on, while its machine's other tunnels work; closing it is
// still recorded. Resuming lets both through again.
func TestPausedTunnelRefused(t *testing.T) {
	ctx := context.Background()
	r := newPluginRig(t, store.PortRange{Lo: 20000, Hi: 20099})
	m := r.register(t, "alpha", 2)
	metas := map[string]string{"token": m.secret}
	port := func(i int) int {
		tn, err := r.svc.Tunnel(ctx, m.tunnels[i])
		if err != nil {
			t.Fatal(err)
		}
		return tn.RemotePort
	}
	answer := func(body string) string { t.Helper(); return r.answer(t, body) }
	const ok = `{"reject":false,"unchange":true}`
	pause := func(on bool) {
		t.Helper()
		if _, err := r.svc.UpdateTunnel(ctx, m.tunnels[0], machines.TunnelInput{Paused: &on}); err != nil {
			t.Fatal(err)
		}
	}
	if got := answer(newUserConn(m.user, m.proxy(0), metas)); got != ok {
		t.Fatalf("before the pause: %s", got)
	}
	pause(true)
	refused := fmt.Sprintf(`{"reject":true,"reject_reason":"proxy \"%s\": tunnel %d of machine %d is paused","unchange":false}`, m.proxy(0), m.tunnels[0], m.id)
	if got := answer(newUserConn(m.user, m.proxy(0), metas)); got != refused {
		t.Fatalf("a connection through a paused tunnel: %s\nwant %s", got, refused)
	}
	if got := answer(proxyCall("NewProxy", m.user, m.proxy(0), port(0), metas)); got != refused {
		t.Fatalf("NewProxy of a paused tunnel: %s\nwant %s", got, refused)
	}
	if got := answer(newUserConn(m.user, m.proxy(1), metas)); got != ok {
		t.Fatalf("the machine's other tunnel: %s", got)
	}
	// frpc drops the proxy once it has the config without it: recorded.
	if got := answer(proxyCall("CloseProxy", m.user, m.proxy(0), 0, metas)); got != ok {
		t.Fatalf("CloseProxy of a paused tunnel: %s", got)
	}
	if tn, _ := r.svc.Tunnel(ctx, m.tunnels[0]); tn.Status != "paused" || tn.StatusReason != machines.PausedReason || !tn.Paused {
		t.Fatalf("paused tunnel shows %q (%q), paused %v", tn.Status, tn.StatusReason, tn.Paused)
	}
	pause(false)
	if got := answer(proxyCall("NewProxy", m.user, m.proxy(0), port(0), metas)); got != ok {
		t.Fatalf("NewProxy after resume: %s", got)
	}
	if got := answer(newUserConn(m.user, m.proxy(0), metas)); got != ok {
		t.Fatalf("a connection after resume: %s", got)
	}
	if tn, _ := r.svc.Tunnel(ctx, m.tunnels[0]); tn.Status != "active" || tn.Paused {
		t.Fatalf("resumed tunnel shows %q, paused %v", tn.Status, tn.Paused)
	}
}

// ping is frps's Ping call for user.
func ping(user string, metas map[string]string) string {
	m, _ := json.Marshal(metas)
	return fmt.Sprintf(`{"version":"0.1.0","op":"Ping","content":{"user":{"user":%q,"metas":%s}}}`, user, m)
}

// TestPingsAreWrittenTogether: Pings write nothing themselves; FlushSeen
// (every SeenEvery) writes every machine's latest one in one commit, so a
// fleet's Pings no longer empty every cache at the ping rate. A Ping
// whose write fails is still accepted, and written at the next flush.
func TestPingsAreWrittenTogether(t *testing.T) {
	r := newPluginRig(t, store.PortRange{Lo: 31000, Hi: 31100})
	ms := []pluginMachine{r.register(t, "pinger", 0), r.register(t, "other", 0), r.register(t, "third", 0)}
	clock := time.Unix(1_800_000_000, 0)
	r.plugin.Now = func() time.Time { return clock }
	ctx := context.Background()
	st := r.plugin.Store
	seen := func(m pluginMachine) time.Time {
		t.Helper()
		got, err := st.GetMachine(ctx, m.id)
		if err != nil {
			t.Fatal(err)
		}
		return got.LastSeen
	}
	pingAll := func() {
		t.Helper()
		for _, m := range ms {
			w := r.call(ping(m.user, map[string]string{frpconf.MetaToken: m.secret}))
			if w.Code != 200 || !strings.Contains(w.Body.String(), `"reject":false`) {
				t.Fatalf("Ping: %d %s", w.Code, w.Body)
			}
		}
	}
	before := st.Changes()
	for range 5 {
		clock = clock.Add(2 * time.Second)
		pingAll()
	}
	if st.Changes() != before || !seen(ms[0]).IsZero() {
		t.Fatalf("Pings wrote by themselves: changes %d → %d, last_seen %v", before, st.Changes(), seen(ms[0]))
	}
	if err := r.plugin.FlushSeen(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if !seen(m).Equal(clock) {
			t.Fatalf("%d's last_seen after the flush = %v, want the last Ping's %v", m.id, seen(m), clock)
		}
	}
	if n := st.Changes() - before; n != 1 {
		t.Fatalf("the flush of three machines made %d commits, want 1", n)
	}
	// The database refusing the write: the Ping still passes, and the
	// flush fails and is tried again.
	clock = clock.Add(revtunnel.SeenEvery)
	if _, err := st.DB().Exec("CREATE TRIGGER no_touch BEFORE UPDATE OF last_seen ON machines BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"); err != nil {
		t.Fatal(err)
	}
	pingAll()
	if err := r.plugin.FlushSeen(ctx); err == nil {
		t.Fatal("a refused write flushed")
	}
	if _, err := st.DB().Exec("DROP TRIGGER no_touch"); err != nil {
		t.Fatal(err)
	}
	if err := r.plugin.FlushSeen(ctx); err != nil || !seen(ms[2]).Equal(clock) {
		t.Fatalf("the next flush: %v, last_seen %v, want %v", err, seen(ms[2]), clock)
	}
}

// TestTargetProxies: a machine serving another machine's site opens its
// part on its own port only, as a tcp proxy; no other machine may; a
// paused site's parts are refused; the part's status follows its proxy.
func TestTargetProxies(t *testing.T) {
	ctx := context.Background()
	r := newPluginRig(t, store.PortRange{Lo: 20000, Hi: 20099})
	owner, standby := r.register(t, "alpha", 0), r.register(t, "beta", 0)
	kind, name, sub, port := "http", "web", "web", 8080
	web, err := r.svc.CreateTunnel(ctx, machines.TunnelInput{MachineID: &owner.id, Name: &name, Kind: &kind, Subdomain: &sub, LocalPort: &port,
		Targets: &[]machines.TargetInput{{MachineID: owner.id, LocalPort: 8080}, {MachineID: standby.id, LocalPort: 8081}}})
	if err != nil {
		t.Fatal(err)
	}
	tg := web.Targets[1]
	targets, _ := r.svc.Store.TargetsOf(ctx, web.ID)
	proxy := func(m pluginMachine) string { return m.user + "." + frpconf.TargetProxy(targets[0].ID) }
	answer := func(body string) string { t.Helper(); return r.answer(t, body) }
	const ok = `{"reject":false,"unchange":true}`
	bm := map[string]string{"token": standby.secret}
	if got := answer(proxyCallAs("NewProxy", standby.user, proxy(standby), "tcp", tg.RemotePort, bm)); got != ok {
		t.Fatalf("the standby opening its part: %s", got)
	}
	if got, _ := r.svc.Tunnel(ctx, web.ID); got.Targets[1].Status != "active" {
		t.Fatalf("the part after NewProxy: %+v", got.Targets[1])
	}
	if got := answer(newUserConn(standby.user, proxy(standby), bm)); got != ok {
		t.Fatalf("a connection to the part: %s", got)
	}
	refused := func(m pluginMachine, why string) string {
		return fmt.Sprintf(`{"reject":true,"reject_reason":"proxy \"%s\": %s","unchange":false}`, proxy(m), why)
	}
	for _, c := range []struct {
		m         pluginMachine
		typ       string
		port      int
		want      string
		whoseName string
	}{
		{owner, "tcp", tg.RemotePort, fmt.Sprintf(`{"reject":true,"reject_reason":"proxy \"%s\" is not a target of machine %d","unchange":false}`, proxy(owner), owner.id), "alpha"},
		{standby, "tcp", tg.RemotePort + 1, fmt.Sprintf(`{"reject":true,"reject_reason":"proxy \"%s\" may not bind port %d (machine %d owns %d for it)","unchange":false}`, proxy(standby), tg.RemotePort+1, standby.id, tg.RemotePort), "beta"},
		{standby, "udp", tg.RemotePort, refused(standby, `type \"udp\" is not allowed, its tunnel is tcp`), "beta"},
	} {
		metas := map[string]string{"token": c.m.secret}
		if got := answer(proxyCallAs("NewProxy", c.m.user, proxy(c.m), c.typ, c.port, metas)); got != c.want {
			t.Errorf("NewProxy of the part by %s as %s on %d: %s\nwant %s", c.whoseName, c.typ, c.port, got, c.want)
		}
	}
	paused := true
	if _, err := r.svc.UpdateTunnel(ctx, web.ID, machines.TunnelInput{Paused: &paused}); err != nil {
		t.Fatal(err)
	}
	want := refused(standby, fmt.Sprintf("tunnel %d, which machine %d serves, is paused", web.ID, standby.id))
	if got := answer(newUserConn(standby.user, proxy(standby), bm)); got != want {
		t.Fatalf("a connection to a paused site's part: %s\nwant %s", got, want)
	}
	if got := answer(proxyCallAs("CloseProxy", standby.user, proxy(standby), "tcp", 0, bm)); got != ok {
		t.Fatalf("CloseProxy: %s", got)
	}
	if got, _ := r.svc.Tunnel(ctx, web.ID); got.Targets[1].Status != "paused" {
		t.Fatalf("the paused site's part: %+v", got.Targets[1])
	}
}

// TestARestartedClientStaysOnline: frps tells of a session's end when it
// notices, which may be after the machine's restarted client logged in
// again (a new run id), or, with the same run id, between the new login
// and its proxies. Either way the machine and its tunnel end online; the
// current session's end still marks it offline.
func TestARestartedClientStaysOnline(t *testing.T) {
	ctx := context.Background()
	r := newPluginRig(t, store.PortRange{Lo: 20000, Hi: 20099})
	m := r.register(t, "alpha", 1)
	metas, _ := json.Marshal(map[string]string{"token": m.secret})
	ok := `{"reject":false,"unchange":true}`
	login := func(run string) string {
		return fmt.Sprintf(`{"version":"0.1.0","op":"Login","content":{"user":%q,"metas":%s,"run_id":%q,"client_address":"127.0.0.1:4000"}}`, m.user, metas, run)
	}
	mach, err := r.svc.Store.GetMachine(ctx, m.id)
	if err != nil {
		t.Fatal(err)
	}
	tun, _ := r.svc.Tunnel(ctx, m.tunnels[0])
	ports := map[string]int{m.user + "." + frpconf.ProxySSH: mach.TunnelPort, m.proxy(0): tun.RemotePort}
	proxy := func(op, run, name string) string {
		return fmt.Sprintf(`{"version":"0.1.0","op":%q,"content":{"user":{"user":%q,"metas":%s,"run_id":%q},"proxy_name":%q,"proxy_type":"tcp","remote_port":%d}}`,
			op, m.user, metas, run, name, ports[name])
	}
	ssh := m.user + "." + frpconf.ProxySSH
	status := func() (machine, tunnel string) {
		mach, err := r.svc.Store.GetMachine(ctx, m.id)
		if err != nil {
			t.Fatal(err)
		}
		tn, _ := r.svc.Tunnel(ctx, m.tunnels[0])
		return mach.Status, tn.Status
	}
	for _, call := range []string{login("run-a"), proxy("NewProxy", "run-a", ssh), proxy("NewProxy", "run-a", m.proxy(0))} {
		if got := r.answer(t, call); got != ok {
			t.Fatalf("%s: %s", call, got)
		}
	}
	// A new client (run-b) logs in and opens its proxies; then frps tells
	// that run-a's proxies closed.
	for _, call := range []string{login("run-b"), proxy("NewProxy", "run-b", ssh), proxy("NewProxy", "run-b", m.proxy(0)),
		proxy("CloseProxy", "run-a", ssh), proxy("CloseProxy", "run-a", m.proxy(0))} {
		r.answer(t, call)
	}
	if mach, tn := status(); mach != "online" || tn != "active" {
		t.Fatalf("after a replaced session's end: machine %s, tunnel %s", mach, tn)
	}
	// The same run id reconnecting: its login, the old control's close,
	// then its proxies.
	for _, call := range []string{login("run-b"), proxy("CloseProxy", "run-b", ssh), proxy("NewProxy", "run-b", ssh)} {
		r.answer(t, call)
	}
	if mach, _ := status(); mach != "online" {
		t.Fatalf("after a reconnect with the same run id: machine %s", mach)
	}
	// The current session ending is news.
	r.answer(t, proxy("CloseProxy", "run-b", ssh))
	if mach, _ := status(); mach != "offline" {
		t.Fatalf("after the current session's end: machine %s", mach)
	}
}
