package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/logstream"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// TestTwoDaemonsOnOneDatabase: two daemons on one PostgreSQL database (the
// sealing key copied, as it travels with an install). What one writes,
// the other's cached reads show within 1 s: the settings, the machine
// list, a rename; a session made on one is good on the other.
func TestTwoDaemonsOnOneDatabase(t *testing.T) {
	url := testutil.PostgresURL(t)
	// As Serve builds it on a machine without systemd (the status lists
	// the units).
	noSystemd := app.Deps{Units: units.Unavailable{}}
	a := newWiredDaemonWith(t, func(c *config.Config) { c.Database = url }, noSystemd)
	a.call("POST", "/api/auth/setup", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	key, err := os.ReadFile(filepath.Join(a.a.Config.DataDir, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	b := newWiredDaemonWith(t, func(c *config.Config) {
		c.Database = url
		if err := os.WriteFile(filepath.Join(c.DataDir, "secret.key"), key, 0o600); err != nil {
			t.Fatal(err)
		}
	}, noSystemd)
	a.call("POST", "/api/auth/login", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	b.cookie = a.cookie
	var st struct {
		Authenticated bool `json:"authenticated"`
	}
	b.call("GET", "/api/auth/status", "", http.StatusOK, &st)
	if !st.Authenticated {
		t.Fatal("a session made on one daemon is not good on the other")
	}

	within := func(what string, check func() error) {
		t.Helper()
		d := testutil.Eventually(t, time.Second, what, check)
		t.Logf("%s: seen by the other daemon after %s", what, d.Round(time.Millisecond))
	}
	// Read first, so that each daemon holds the value in its caches.
	var status struct {
		Domain string `json:"domain"`
	}
	b.call("GET", "/api/local/status", "", http.StatusOK, &status)
	a.call("POST", "/api/local/skip", `{"domain":"one.example.test"}`, http.StatusOK, nil)
	within("the domain set on the first", func() error {
		b.call("GET", "/api/local/status", "", http.StatusOK, &status)
		if status.Domain != "one.example.test" {
			return fmt.Errorf("domain %q", status.Domain)
		}
		return nil
	})

	var list []struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	}
	b.call("GET", "/api/machines", "", http.StatusOK, &list)
	id, _ := a.join("nas")
	within("a machine joined through the first", func() error {
		b.call("GET", "/api/machines", "", http.StatusOK, &list)
		if len(list) != 1 || list[0].ID != id {
			return fmt.Errorf("machines %v", list)
		}
		return nil
	})
	a.call("GET", "/api/machines", "", http.StatusOK, &list)
	b.call("PATCH", fmt.Sprintf("/api/machines/%d", id), `{"name":"nas-renamed"}`, http.StatusOK, nil)
	within("a rename on the second", func() error {
		a.call("GET", "/api/machines", "", http.StatusOK, &list)
		if len(list) != 1 || list[0].Name != "nas-renamed" {
			return fmt.Errorf("machines %v", list)
		}
		return nil
	})
}

// TestLoginLimitsCountAcrossEdges: wrong passwords spread over two edges
// count as one client's: after five on each, the next one on either is
// refused (429) before any password is checked, even the right one.
func TestLoginLimitsCountAcrossEdges(t *testing.T) {
	a, b := twoEdges(t, "", "")
	wrong := `{"password":"not the password at all"}`
	for range auth.MaxFailures / 2 {
		a.call("POST", "/api/auth/login", wrong, http.StatusUnauthorized, nil)
		b.call("POST", "/api/auth/login", wrong, http.StatusUnauthorized, nil)
	}
	b.call("POST", "/api/auth/login", `{"password":"correct horse battery staple"}`, http.StatusTooManyRequests, nil)
	a.call("POST", "/api/auth/login", wrong, http.StatusTooManyRequests, nil)
}

// TestJoinLimitsCountAcrossEdges: wrong join tokens spread over two edges
// count as one client's, as wrong passwords do: after five on each, the
// next join on either is refused (429), even with a good token. The
// dashboard's login keeps a budget of its own.
func TestJoinLimitsCountAcrossEdges(t *testing.T) {
	a, b := twoEdges(t, "", "")
	a.call("POST", "/api/auth/login", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	var tok struct{ Token string }
	a.call("POST", "/api/bootstrap/tokens", `{}`, http.StatusOK, &tok)
	guess := func(d *wiredDaemon, token string, want int) {
		t.Helper()
		d.call("POST", "/api/bootstrap", fmt.Sprintf(`{"token":%q,"name":"nas","username":"pi"}`, token), want, nil)
	}
	for i := range auth.MaxFailures / 2 {
		guess(a, fmt.Sprintf("guess-a-%d", i), http.StatusUnauthorized)
		guess(b, fmt.Sprintf("guess-b-%d", i), http.StatusUnauthorized)
	}
	guess(b, tok.Token, http.StatusTooManyRequests)
	guess(a, tok.Token, http.StatusTooManyRequests)
	a.call("POST", "/api/auth/login", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
}

// TestMachineOnlineThroughEitherEdge: each edge's frps plugin records what
// it sees of a machine; the machine is online while one edge has it, and
// each edge's view shows under "edges" on both daemons.
func TestMachineOnlineThroughEitherEdge(t *testing.T) {
	a, b := twoEdges(t, "", "")
	a.call("POST", "/api/auth/login", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	b.cookie = a.cookie

	var tok struct{ Token string }
	a.call("POST", "/api/bootstrap/tokens", `{}`, http.StatusOK, &tok)
	var reg struct {
		MachineID int64  `json:"machine_id"`
		Config    string `json:"revtunnel_client_config"`
	}
	a.call("POST", "/api/bootstrap", fmt.Sprintf(`{"token":%q,"name":"nas","username":"pi"}`, tok.Token), http.StatusOK, &reg)
	secret := regexp.MustCompile(`token = '([^']+)'`).FindStringSubmatch(reg.Config)
	if secret == nil {
		t.Fatalf("no token in the client config:\n%s", reg.Config)
	}
	u := regexp.MustCompile(`(?m)^user = '(m(\d+))'`).FindStringSubmatch(reg.Config)
	if u == nil {
		t.Fatalf("no user in the client config:\n%s", reg.Config)
	}
	user := u[1]
	reg.MachineID, _ = strconv.ParseInt(u[2], 10, 64)
	plugin := func(d *wiredDaemon, op string, content any) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"version": "0.1.0", "op": op, "content": content})
		r := httptest.NewRequest("POST", "/frp/plugin", bytes.NewReader(body))
		r.RemoteAddr = "127.0.0.1:40000"
		w := httptest.NewRecorder()
		d.a.Plugin.ServeHTTP(w, r)
		if w.Code != http.StatusOK || strings.Contains(w.Body.String(), `"reject":true`) {
			t.Fatalf("%s on %s: %d %s", op, d.a.Config.EdgeName, w.Code, w.Body)
		}
	}
	metas := map[string]string{"token": secret[1]}
	login := func(d *wiredDaemon) {
		plugin(d, "Login", map[string]any{"user": user, "metas": metas, "client_address": "192.0.2.9:50000"})
	}
	closeSSH := func(d *wiredDaemon) {
		plugin(d, "CloseProxy", map[string]any{"user": map[string]any{"user": user, "metas": metas}, "proxy_name": user + ".ssh", "proxy_type": "tcp"})
	}
	type edgeView struct {
		Edge, Status string
	}
	// Each edge reads the machine's edges through a memo that the other
	// edge's commit empties by a notification, which arrives a moment
	// later: each edge must show it within 5 s.
	want := func(status string, edges ...edgeView) {
		t.Helper()
		for _, d := range []*wiredDaemon{a, b} {
			testutil.Eventually(t, 5*time.Second, "the machine as "+d.a.Config.EdgeName+" shows it", func() error {
				var m struct {
					Status string
					Edges  []edgeView
				}
				d.call("GET", fmt.Sprintf("/api/machines/%d", reg.MachineID), "", http.StatusOK, &m)
				if m.Status != status || fmt.Sprint(m.Edges) != fmt.Sprint(edges) {
					return fmt.Errorf("on %s: %s %v, want %s %v", d.a.Config.EdgeName, m.Status, m.Edges, status, edges)
				}
				return nil
			})
		}
	}
	login(a)
	want("online", edgeView{"edge-a", "online"})
	login(b)
	want("online", edgeView{"edge-a", "online"}, edgeView{"edge-b", "online"})
	closeSSH(a)
	want("online", edgeView{"edge-a", "offline"}, edgeView{"edge-b", "online"})
	closeSSH(b)
	want("offline", edgeView{"edge-a", "offline"}, edgeView{"edge-b", "offline"})
}

// TestTunnelMadeOnOneEdgeGuardedByTheOther: a password tunnel created on
// edge A is guarded by edge B's access gate within 1 s (B hears the topic,
// not only its 5 s pass), and deleting it on A closes it on B as fast.
func TestTunnelMadeOnOneEdgeGuardedByTheOther(t *testing.T) {
	a, b := twoEdges(t, "", "")
	a.call("POST", "/api/auth/login", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	a.call("POST", "/api/local/skip", `{"domain":"one.example.test"}`, http.StatusOK, nil)
	id, _ := a.join("nas")
	check := func() int {
		r := httptest.NewRequest("GET", "/check", nil)
		r.Host, r.RemoteAddr = "web.one.example.test", "127.0.0.1:40000"
		r.Header.Set("X-Forwarded-Method", "GET")
		r.Header.Set("X-Forwarded-Uri", "/")
		w := httptest.NewRecorder()
		b.a.Gate.Handler().ServeHTTP(w, r)
		return w.Code
	}
	testutil.Eventually(t, 6*time.Second, "edge B knows the domain", func() error {
		if b.a.Gate.Domain() != "one.example.test" {
			return fmt.Errorf("domain %q", b.a.Gate.Domain())
		}
		return nil
	})
	if got := check(); got != http.StatusForbidden {
		t.Fatalf("before the tunnel exists: %d", got)
	}
	var tun struct{ ID int64 }
	a.call("POST", "/api/tunnels", fmt.Sprintf(`{"machine_id":%d,"name":"web","kind":"http","local_port":8080,"subdomain":"web","access":"password","password":"correct horse battery staple"}`, id), http.StatusCreated, &tun)
	d := testutil.Eventually(t, time.Second, "edge B's gate asks for the password", func() error {
		if got := check(); got != http.StatusFound {
			return fmt.Errorf("check answered %d", got)
		}
		return nil
	})
	t.Logf("edge B guarded the new tunnel %s after it was made on edge A", d.Round(time.Millisecond))
	a.call("DELETE", fmt.Sprintf("/api/tunnels/%d", tun.ID), "", http.StatusOK, nil)
	testutil.Eventually(t, time.Second, "edge B forgets the deleted tunnel", func() error {
		if got := check(); got != http.StatusForbidden {
			return fmt.Errorf("check answered %d", got)
		}
		return nil
	})
	// With another edge, each edge's Caddyfile sends the ACME challenges
	// its Caddy did not order to its gate, which asks the other edge.
	for _, d := range []*wiredDaemon{a, b} {
		file, err := d.a.Setup.ProxyFile(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if want := "handle /.well-known/acme-challenge/* {\n\t\treverse_proxy " + d.a.Config.GateListen; !strings.Contains(string(file), want) {
			t.Fatalf("%s's Caddyfile does not relay challenges:\n%s", d.a.Config.EdgeName, file)
		}
	}
}

// TestOperationLogReachesEveryEdge: an operation running on edge A is
// followed live from edge B's log stream, lines and end, marked as A's.
func TestOperationLogReachesEveryEdge(t *testing.T) {
	a, b := twoEdges(t, "", "")
	_, ch, cancel := b.a.Hub.Subscribe()
	defer cancel()
	time.Sleep(300 * time.Millisecond) // B's listener is up
	op, err := a.a.Hub.Begin("firewall")
	if err != nil {
		t.Fatal(err)
	}
	op.Line("info", "applying the ruleset")
	op.Done(true)
	var got []logstream.Message
	deadline := time.After(5 * time.Second)
	for len(got) < 2 {
		select {
		case m := <-ch:
			if m.Event == "" {
				got = append(got, m)
			}
		case <-deadline:
			t.Fatalf("edge B heard %+v of edge A's operation within 5 s", got)
		}
	}
	if got[0].Line != "applying the ruleset" || got[0].Edge != "edge-a" || got[0].Op != "firewall" || !got[1].Done || got[1].OK == nil || !*got[1].OK {
		t.Fatalf("edge B heard %+v", got)
	}
	// A dashboard opening B's log now gets the operation so far.
	backlog, _, cancel2 := b.a.Hub.Subscribe()
	defer cancel2()
	if len(backlog) != 2 || backlog[0].Edge != "edge-a" {
		t.Fatalf("backlog on B: %+v", backlog)
	}
}

// TestConfigDeliveredByTheEdgeThatHasTheMachine: each edge has its own
// server host, so each would render the machine's config with its own
// address. Only the edge the machine is connected through delivers it:
// the other edge's changes reach the machine through it, with its address.
func TestConfigDeliveredByTheEdgeThatHasTheMachine(t *testing.T) {
	a, b := twoEdges(t, "a.example.test", "b.example.test")
	a.call("POST", "/api/auth/login", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	b.cookie = a.cookie
	id, agent := a.join("nas")
	// The machine's tunnel client logs in to edge A's tunnel server.
	if err := a.a.Store.SetMachineEdgeStatus(context.Background(), id, mustEdge(t, a), "online", time.Now()); err != nil {
		t.Fatal(err)
	}
	// A tunnel made on edge B: the config the machine gets names edge A.
	b.call("POST", "/api/tunnels", fmt.Sprintf(`{"machine_id":%d,"name":"db","kind":"tcp","local_port":5432}`, id), http.StatusCreated, nil)
	testutil.Eventually(t, 10*time.Second, "the machine gets the tunnel made on edge B", func() error {
		cfg, n, _ := agent.last()
		if n == 0 || !strings.Contains(cfg, "localPort = 5432") {
			return fmt.Errorf("%d configs, last:\n%s", n, cfg)
		}
		return nil
	})
	time.Sleep(2 * time.Second) // anything edge B would push, it has pushed by now
	for i, cfg := range agent.all() {
		if !strings.Contains(cfg, "serverAddr = 'a.example.test'") {
			t.Fatalf("config %d the machine got does not name edge A:\n%s", i+1, cfg)
		}
	}
}

// TestEveryMachineReachesEveryEdge: a machine joined through edge A keeps
// its main client there and gets a client for edge B, rendered with B's
// address and tunnel port and the same ports as on A, whichever edge the
// change was made on; a retired edge leaves every machine's set.
func TestEveryMachineReachesEveryEdge(t *testing.T) {
	a, b := twoEdges(t, "a.example.test", "b.example.test")
	a.call("POST", "/api/auth/login", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	b.cookie = a.cookie
	id, machine := a.join("nas")
	edgeA, edgeB := mustEdge(t, a), mustEdge(t, b)
	if err := a.a.Store.SetMachineEdgeStatus(context.Background(), id, edgeA, "online", time.Now()); err != nil {
		t.Fatal(err)
	}
	b.call("POST", "/api/tunnels", fmt.Sprintf(`{"machine_id":%d,"name":"db","kind":"tcp","local_port":5432}`, id), http.StatusCreated, nil)
	remote := regexp.MustCompile(`remotePort = (\d+)`)
	ports := func(cfg string) string {
		var out []string
		for _, m := range remote.FindAllStringSubmatch(cfg, -1) {
			out = append(out, m[1])
		}
		return strings.Join(out, ",")
	}
	var set agent.ClientSet
	testutil.Eventually(t, 15*time.Second, "the machine gets a client for each edge", func() error {
		set, _ = machine.lastSet()
		if len(set.Edges) != 1 || !strings.Contains(set.Primary, "localPort = 5432") {
			return fmt.Errorf("last set: %+v", set)
		}
		return nil
	})
	b1 := set.Edges[0]
	if b1.Edge != "edge-b" || !strings.Contains(set.Primary, "serverAddr = 'a.example.test'") ||
		!strings.Contains(b1.Config, "serverAddr = 'b.example.test'") || !strings.Contains(b1.Config, fmt.Sprintf("serverPort = %d", b.a.Config.FRPSPort)) {
		t.Fatalf("main config:\n%s\nedge %s's:\n%s", set.Primary, b1.Edge, b1.Config)
	}
	if p := ports(set.Primary); p == "" || p != ports(b1.Config) {
		t.Fatalf("ports on edge A %q, on edge B %q", p, ports(b1.Config))
	}
	if !strings.Contains(b1.Config, "/etc/revtunnel/client-edge-b.toml") {
		t.Fatalf("edge B's client names another file:\n%s", b1.Config)
	}
	admin := regexp.MustCompile(`(?s)\[webServer\].*?port = (\d+)`)
	if pa, pb := admin.FindStringSubmatch(set.Primary), admin.FindStringSubmatch(b1.Config); pa == nil || pb == nil || pa[1] == pb[1] {
		t.Fatalf("the two clients' admin ports: %v and %v", pa, pb)
	}

	a.call("DELETE", fmt.Sprintf("/api/edges/%d", edgeB), "", http.StatusAccepted, nil)
	testutil.Eventually(t, 15*time.Second, "the retired edge leaves the machine's set", func() error {
		if set, _ = machine.lastSet(); len(set.Edges) != 0 {
			return fmt.Errorf("last set names %d other edges", len(set.Edges))
		}
		return nil
	})
}

// TestRejoinOnAClusterIsOneGeneration: a machine that rejoins gets one new
// generation, recorded with the digest the delivery reconciler computes
// (its main config and its client for each other edge), not a second one
// when the reconciler hashes it its own way.
func TestRejoinOnAClusterIsOneGeneration(t *testing.T) {
	a, b := twoEdges(t, "a.example.test", "b.example.test")
	a.call("POST", "/api/auth/login", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	b.cookie = a.cookie
	id, machine := a.join("nas")
	mustEdge(t, b)
	if err := a.a.Store.SetMachineEdgeStatus(context.Background(), id, mustEdge(t, a), "online", time.Now()); err != nil {
		t.Fatal(err)
	}
	settled := func(what string) store.ConfigState {
		t.Helper()
		var cs store.ConfigState
		testutil.Eventually(t, 15*time.Second, what, func() error {
			m, err := a.a.Store.GetMachine(context.Background(), id)
			if err != nil {
				return err
			}
			cs = m.Config
			if set, _ := machine.lastSet(); len(set.Edges) != 1 || cs.AppliedGen != cs.DesiredGen {
				return fmt.Errorf("desired %d, applied %d, %d other edges", cs.DesiredGen, cs.AppliedGen, len(set.Edges))
			}
			return nil
		})
		return cs
	}
	b.call("POST", "/api/tunnels", fmt.Sprintf(`{"machine_id":%d,"name":"db","kind":"tcp","local_port":5432}`, id), http.StatusCreated, nil)
	before := settled("the machine runs its clients for both edges")
	rejoinedAt := time.Now()
	req, _ := http.NewRequest("POST", a.srv.URL+"/api/machines/rejoin", strings.NewReader(`{"username":"pi"}`))
	req.Header.Set("Authorization", "Bearer "+machine.agentToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("rejoin: %d %s", res.StatusCode, raw)
	}
	// The machine's agent now wants the new agent token, which this fake
	// does not know: the reconciler's next attempt after the rejoin is
	// refused, but it records what it wants first.
	var after store.ConfigState
	testutil.Eventually(t, 15*time.Second, "the reconciler's attempt after the rejoin", func() error {
		m, err := a.a.Store.GetMachine(context.Background(), id)
		if err != nil {
			return err
		}
		after = m.Config
		if m.ConfigPush == nil || !m.ConfigPush.At.After(rejoinedAt) {
			return fmt.Errorf("no attempt yet (desired %d)", after.DesiredGen)
		}
		return nil
	})
	if after.DesiredGen != before.DesiredGen+1 {
		t.Fatalf("a rejoin took the machine from generation %d to %d, want %d", before.DesiredGen, after.DesiredGen, before.DesiredGen+1)
	}
}

func mustEdge(t *testing.T, d *wiredDaemon) int64 {
	t.Helper()
	var id int64
	testutil.Eventually(t, 5*time.Second, d.a.Config.EdgeName+"'s row", func() error {
		if id, _ = d.a.Edge(); id == 0 {
			return fmt.Errorf("not recorded yet")
		}
		return nil
	})
	return id
}

// all returns every config the fake machine was given.
func (f *fakeMachine) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.configs...)
}

// twoEdges starts edge-a and edge-b, two daemons on one new PostgreSQL
// database, each with the given server host ("" for none): the operator
// set up on edge-a, the sealing key copied to edge-b as edge join does.
func twoEdges(t *testing.T, hostA, hostB string) (a, b *wiredDaemon) {
	return twoEdgesWith(t, hostA, hostB, "", "")
}

// twoEdgesWith is twoEdges with each edge's frps dashboard API at the
// given address (the default when "").
func twoEdgesWith(t *testing.T, hostA, hostB, frpsA, frpsB string) (a, b *wiredDaemon) {
	t.Helper()
	url := testutil.PostgresURL(t)
	noSystemd := app.Deps{Units: units.Unavailable{}}
	a = newWiredDaemonWith(t, func(c *config.Config) {
		c.Database, c.EdgeName, c.ServerHost = url, "edge-a", hostA
		if frpsA != "" {
			c.FRPSDashboardListen = frpsA
		}
	}, noSystemd)
	a.call("POST", "/api/auth/setup", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	key, err := os.ReadFile(filepath.Join(a.a.Config.DataDir, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	b = newWiredDaemonWith(t, func(c *config.Config) {
		c.Database, c.EdgeName, c.ServerHost = url, "edge-b", hostB
		if frpsB != "" {
			c.FRPSDashboardListen = frpsB
		}
		if err := os.WriteFile(filepath.Join(c.DataDir, "secret.key"), key, 0o600); err != nil {
			t.Fatal(err)
		}
	}, noSystemd)
	return a, b
}

// fakeFRPS answers frps's dashboard API (GET /api/proxy/tcp) with the
// ssh and agent proxies of the machines it is told are connected.
type fakeFRPS struct {
	mu        sync.Mutex
	connected []int64
	addr      string
}

func newFakeFRPS(t *testing.T) *fakeFRPS {
	f := &fakeFRPS{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/proxy/tcp" {
			http.NotFound(w, r)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		ps := []map[string]any{{"name": "m999.tunnel-1", "status": "offline"}}
		for _, id := range f.connected {
			ps = append(ps, map[string]any{"name": fmt.Sprintf("m%d.ssh", id), "status": "online"},
				map[string]any{"name": fmt.Sprintf("m%d.agent", id), "status": "online"})
		}
		json.NewEncoder(w).Encode(map[string]any{"proxies": ps})
	}))
	t.Cleanup(srv.Close)
	f.addr = strings.TrimPrefix(srv.URL, "http://")
	return f
}

func (f *fakeFRPS) set(ids ...int64) {
	f.mu.Lock()
	f.connected = ids
	f.mu.Unlock()
}

// TestReconnectToAnEdgeBackUp: each edge records what its frps says of
// its connections, whatever the plugin heard; a machine missing from an
// edge that is up is asked to reconnect to it by the first edge that has
// it: edge B's client by edge A (PUT /clients naming edge-b in reconnect),
// then, once the machine is gone from its home edge A, the home client by
// edge B (POST /restart).
func TestReconnectToAnEdgeBackUp(t *testing.T) {
	fa, fb := newFakeFRPS(t), newFakeFRPS(t)
	a, b := twoEdgesWith(t, "a.example.test", "b.example.test", fa.addr, fb.addr)
	a.call("POST", "/api/auth/login", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	id, machine := a.join("nas")
	edgeA, edgeB := mustEdge(t, a), mustEdge(t, b)
	ctx := context.Background()
	status := func(edge int64) string {
		conns, err := a.a.Store.MachineEdges(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range conns[id] {
			if c.EdgeID == edge {
				return c.Status
			}
		}
		return "none"
	}
	want := func(what string, edge int64, st string) {
		t.Helper()
		testutil.Eventually(t, 15*time.Second, what, func() error {
			if got := status(edge); got != st {
				return fmt.Errorf("status %s", got)
			}
			return nil
		})
	}

	// Connected to A's frps, which no plugin call said: A records it.
	fa.set(id)
	want("edge A records what its frps says", edgeA, "online")
	// B is up and does not have it: A has its agent restart edge B's client.
	testutil.Eventually(t, 30*time.Second, "a set asking to reconnect edge-b", func() error {
		machine.mu.Lock()
		defer machine.mu.Unlock()
		for _, s := range machine.sets {
			if slices.Contains(s.Reconnect, "edge-b") {
				return nil
			}
		}
		return fmt.Errorf("%d sets, none names edge-b in reconnect", len(machine.sets))
	})
	fb.set(id)
	want("edge B records the machine", edgeB, "online")

	// A's frps lost it (A was powered off and came back): A records it
	// offline, and B, now the first edge that has it, restarts the home
	// edge's client.
	_, _, before := machine.last()
	fa.set()
	want("edge A records the lost connection", edgeA, "offline")
	testutil.Eventually(t, 30*time.Second, "the home client restarted", func() error {
		if _, _, n := machine.last(); n <= before {
			return fmt.Errorf("%d restarts", n)
		}
		return nil
	})
}
