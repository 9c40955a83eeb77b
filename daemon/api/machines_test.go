package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// machinesEnv is newEnv plus the machines domain, logged in.
type machinesEnv struct {
	*testEnv
	svc    *machines.Service
	cookie string
}

func newMachinesEnv(t testing.TB, ports store.PortRange) *machinesEnv {
	t.Helper()
	return newMachinesEnvOn(t, sqliteEngine, ports)
}

// newMachinesEnvOn is newMachinesEnv on a store of the given engine: the
// daemon's tunnel ports are ports, and its tunnel server checks its
// config with the real frps.
func newMachinesEnvOn(t testing.TB, engine string, ports store.PortRange) *machinesEnv {
	t.Helper()
	return newMachinesEnvWith(t, engine, ports, nil)
}

// newMachinesEnvWith is newMachinesEnvOn with the configuration changed
// by edit (when not nil) before the daemon is built.
func newMachinesEnvWith(t testing.TB, engine string, ports store.PortRange, edit func(*config.Config)) *machinesEnv {
	t.Helper()
	frps, _ := testutil.FRP()
	dir := t.TempDir()
	e := newEnvConfigured(t, newTestDB(t, engine, dir), dir, func(c *config.Config) {
		c.TunnelPortLo, c.TunnelPortHi, c.BinDir = ports.Lo, ports.Hi, filepath.Dir(frps)
		if edit != nil {
			edit(c)
		}
	})
	me := &machinesEnv{testEnv: e, svc: e.app.Machines}
	me.cookie = e.setup()
	return me
}

// vpsKey is the public half of the VPS's default SSH key, which machines
// are given (generated at the first registration).
func (e *machinesEnv) vpsKey(t testing.TB) string {
	t.Helper()
	k, err := e.sshkeys.DefaultPublicKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// expose saves the settings the addresses the dashboard shows follow, as
// the set-up and the settings pages save them: the server host, the
// domain, the bind address and whether the svc firewall runs ("" and
// false leave a setting unset).
func (e *testEnv) expose(t testing.TB, x machines.Exposure) {
	t.Helper()
	ctx := context.Background()
	set := e.app.Setup.Settings
	if err := set.SaveVPS(ctx, localsetup.VPS{Domain: x.Domain, ServerHost: x.Host}); err != nil {
		t.Fatal(err)
	}
	if err := set.SetBindIP(ctx, x.BindIP); err != nil {
		t.Fatal(err)
	}
	if x.FirewallSvc {
		if err := set.SetFirewallMode(ctx, "svc"); err != nil {
			t.Fatal(err)
		}
	}
}

// rebuild serves the same daemon through Options changed by edit: a
// stand-in for one of its parts.
func (e *testEnv) rebuild(edit func(o *Options)) {
	o := optionsFor(e.app)
	edit(&o)
	e.srv = New(o)
}

// ssoOn turns single sign-on on as saved settings (the provider is not
// asked): access gates of mode sso then work.
func (e *machinesEnv) ssoOn(t *testing.T) {
	t.Helper()
	err := e.st.SetSetting(context.Background(), "sso", `{"enabled":true,"name":"SSO","issuer":"https://idp.example.test","client_id":"c","email_domains":["example.com"]}`)
	if err != nil {
		t.Fatal(err)
	}
}

func (e *machinesEnv) data(t *testing.T, r resp, status int) map[string]any {
	t.Helper()
	if r.Code != status {
		t.Fatalf("status = %d, want %d; body %s", r.Code, status, r.Body)
	}
	d, ok := r.json(t)["data"].(map[string]any)
	if !ok {
		t.Fatalf("data is not an object: %s", r.Body)
	}
	return d
}

func (e *machinesEnv) list(t *testing.T, path string) []any {
	t.Helper()
	r := e.do(req{method: "GET", path: path, cookie: e.cookie})
	if r.Code != 200 {
		t.Fatalf("GET %s: %d %s", path, r.Code, r.Body)
	}
	l, ok := r.json(t)["data"].([]any)
	if !ok {
		t.Fatalf("GET %s: data is not a list: %s", path, r.Body)
	}
	return l
}

func (e *machinesEnv) token(t *testing.T) string {
	t.Helper()
	return e.data(t, e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{}`, cookie: e.cookie}), 200)["token"].(string)
}

func (e *machinesEnv) bootstrap(t *testing.T, token, name string) resp {
	b, _ := json.Marshal(map[string]string{"token": token, "name": name, "username": "pi"})
	return e.do(req{method: "POST", path: "/api/bootstrap", body: string(b), peer: "198.51.100.7:5000"})
}

var wide = store.PortRange{Lo: 20000, Hi: 29999}

func TestBootstrapTokenLifecycle(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		d := e.data(t, e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{}`, cookie: e.cookie,
			header: map[string]string{"Host": "vps.example.com:7380"}}), 200)
		tok := d["token"].(string)
		if raw, err := base64Len(tok); err != nil || raw != 32 {
			t.Fatalf("token %q is not 32 random bytes (%d, %v)", tok, raw, err)
		}
		if want := "curl -fsSL http://vps.example.com:7380/static/bootstrap.sh -o bootstrap.sh && bash bootstrap.sh " + tok; d["command"] != want {
			t.Fatalf("command = %q, want %q", d["command"], want)
		}
		exp, _ := time.Parse(time.RFC3339, d["expires_at"].(string))
		if !exp.Equal(e.now.Add(60 * time.Minute)) {
			t.Fatalf("expires_at = %v, want now+60m", exp)
		}
		// --base-url wins over the request.
		withBase := newMachinesEnvWith(t, engine, wide, func(c *config.Config) { c.BaseURL = "https://tunnels.example.org" })
		based := withBase.data(t, withBase.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{"expires_in_minutes": 5}`, cookie: withBase.cookie}), 200)
		if !strings.HasPrefix(based["command"].(string), "curl -fsSL https://tunnels.example.org/static/bootstrap.sh -o bootstrap.sh && bash bootstrap.sh ") {
			t.Fatalf("command = %q", based["command"])
		}
		d2 := e.data(t, e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{"expires_in_minutes": 5}`, cookie: e.cookie}), 200)
		wantError(t, e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{"expires_in_minutes": 0}`, cookie: e.cookie}), 400, "expires_in_minutes must be between 1 and 10080")
		wantError(t, e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{}`}), 401, "authentication required")

		pending := e.list(t, "/api/bootstrap/tokens")
		if len(pending) != 2 {
			t.Fatalf("pending = %v", pending)
		}
		if strings.Contains(fmt.Sprint(pending), tok) || pending[0].(map[string]any)["token"] != nil {
			t.Fatal("the token list shows a secret")
		}
		// Revoke the second; it no longer registers a machine.
		id := fmt.Sprint(d2["id"])
		e.data(t, e.do(req{method: "DELETE", path: "/api/bootstrap/tokens/" + id, cookie: e.cookie}), 200)
		wantError(t, e.do(req{method: "DELETE", path: "/api/bootstrap/tokens/" + id, cookie: e.cookie}), 404, "token not found")
		wantError(t, e.bootstrap(t, d2["token"].(string), "web"), 401, "invalid or expired token")

		// Expiry: the first token stops working after its hour.
		e.now = e.now.Add(61 * time.Minute)
		wantError(t, e.bootstrap(t, tok, "web"), 401, "invalid or expired token")
		if got := e.list(t, "/api/bootstrap/tokens"); len(got) != 0 {
			t.Fatalf("expired token still pending: %v", got)
		}
	})
}

func base64Len(s string) (int, error) {
	b, err := base64RawURL(s)
	return len(b), err
}

func TestBootstrapRegisters(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		tok := e.token(t)
		d := e.data(t, e.bootstrap(t, tok, "raspberry"), 200)
		port := int(d["tunnel_port"].(float64))
		if port < 20000 || port > 29999 {
			t.Fatalf("tunnel_port %d outside the range", port)
		}
		if d["vps_ssh_public_key"] != e.vpsKey(t) || d["agent_token"].(string) == "" || d["agent_local_port"].(float64) != machines.DefaultAgentLocalPort {
			t.Fatalf("registration = %v", d)
		}
		cfg := d["revtunnel_client_config"].(string)
		for _, want := range []string{"serverAddr = '127.0.0.1'", "serverPort = 7000", "user = 'm1'", fmt.Sprintf("remotePort = %d", port), "enable = true"} {
			if !strings.Contains(cfg, want) {
				t.Errorf("client config lacks %q:\n%s", want, cfg)
			}
		}
		// Single use.
		wantError(t, e.bootstrap(t, tok, "again"), 401, "invalid or expired token")
		ms := e.list(t, "/api/machines")
		if len(ms) != 1 || ms[0].(map[string]any)["name"] != "raspberry" || ms[0].(map[string]any)["status"] != "pending" {
			t.Fatalf("machines = %v", ms)
		}
		// The failures are on the stale-token list, newest first, with address and reason.
		stale := e.list(t, "/api/security/stale-tokens")
		if len(stale) != 1 || stale[0].(map[string]any)["client_addr"] != "198.51.100.7" || stale[0].(map[string]any)["reason"] != "token already used" {
			t.Fatalf("stale = %v", stale)
		}
	})
}

func TestBootstrapBadInput(t *testing.T) {
	e := newMachinesEnv(t, wide)
	wantError(t, e.do(req{method: "POST", path: "/api/bootstrap", body: `{"token":"x"}`}), 400, "name, username required")
	wantError(t, e.do(req{method: "POST", path: "/api/bootstrap", body: `{}`}), 400, "token, name, username required")
	wantError(t, e.do(req{method: "POST", path: "/api/bootstrap", body: `{"token":`}), 400, "invalid request body")
	wantError(t, e.bootstrap(t, "not-a-token", "web"), 401, "invalid or expired token")
	tok := e.token(t)
	wantError(t, e.do(req{method: "POST", path: "/api/bootstrap", body: `{"token":"` + tok + `","name":"web","username":"bad user"}`}), 400, "")
	// The token survived the bad request.
	e.data(t, e.bootstrap(t, tok, "web"), 200)
	stale := e.list(t, "/api/security/stale-tokens")
	if len(stale) != 4 || stale[0].(map[string]any)["reason"] == "" || stale[3].(map[string]any)["reason"] != "missing name, username" {
		t.Fatalf("stale = %v", stale)
	}
	if ms := e.list(t, "/api/machines"); len(ms) != 1 {
		t.Fatalf("bad requests created machines: %v", ms)
	}
}

// TestStaleTokensGrouped: repeated failures of one kind from one address
// with one reason are one row with a count, newest first.
func TestStaleTokensGrouped(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		for i := 0; i < 3; i++ {
			e.bootstrap(t, "guess", "web")
			e.now = e.now.Add(time.Second)
		}
		e.do(req{method: "POST", path: "/api/bootstrap", body: `{"token":"x"}`, peer: "198.51.100.9:1"})
		stale := e.list(t, "/api/security/stale-tokens")
		if len(stale) != 2 {
			t.Fatalf("stale = %v", stale)
		}
		newest, older := stale[0].(map[string]any), stale[1].(map[string]any)
		if newest["client_addr"] != "198.51.100.9" || newest["count"] != 1.0 || newest["kind"] != "bootstrap" {
			t.Fatalf("newest = %v", newest)
		}
		if older["count"] != 3.0 || older["first_seen"] == older["created_at"] {
			t.Fatalf("grouped = %v", older)
		}
	})
}

func TestBootstrapRateLimit(t *testing.T) {
	e := newMachinesEnv(t, wide)
	for i := 0; i < auth.MaxFailures; i++ {
		wantError(t, e.bootstrap(t, "guess", "web"), 401, "invalid or expired token")
	}
	r := e.bootstrap(t, e.token(t), "web")
	wantError(t, r, 429, "")
	if r.Header().Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
}

func TestParallelBootstraps(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		const n = 50
		toks := make([]string, n)
		for i := range toks {
			toks[i] = e.token(t)
		}
		var wg sync.WaitGroup
		res := make([]resp, n)
		for i := range toks {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				res[i] = e.bootstrap(t, toks[i], fmt.Sprintf("m%d", i))
			}(i)
		}
		wg.Wait()
		seen := map[int]bool{}
		for i, r := range res {
			if r.Code != 200 {
				t.Fatalf("bootstrap %d: %d %s", i, r.Code, r.Body)
			}
			var body struct {
				Data struct {
					TunnelPort int `json:"tunnel_port"`
				} `json:"data"`
			}
			json.Unmarshal(r.Body.Bytes(), &body)
			if seen[body.Data.TunnelPort] {
				t.Fatalf("port %d handed out twice", body.Data.TunnelPort)
			}
			seen[body.Data.TunnelPort] = true
		}
		// Tunnel and agent ports together are all distinct too.
		all := map[int]bool{}
		for _, m := range e.list(t, "/api/machines") {
			mm := m.(map[string]any)
			for _, k := range []string{"tunnel_port", "agent_port"} {
				p := int(mm[k].(float64))
				if all[p] {
					t.Fatalf("port %d used twice", p)
				}
				all[p] = true
			}
		}
		if len(all) != 2*n {
			t.Fatalf("%d ports for %d machines", len(all), n)
		}
	})
}

func TestOneTokenTenRequests(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		tok := e.token(t)
		var wg sync.WaitGroup
		codes := make([]int, 10)
		for i := range codes {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				codes[i] = e.bootstrap(t, tok, fmt.Sprintf("race%d", i)).Code
			}(i)
		}
		wg.Wait()
		ok, unauthorized := 0, 0
		for _, c := range codes {
			switch c {
			case 200:
				ok++
			case 401:
				unauthorized++
			}
		}
		if ok != 1 || unauthorized != 9 {
			t.Fatalf("codes = %v: want exactly one 200 and nine 401", codes)
		}
		if ms := e.list(t, "/api/machines"); len(ms) != 1 {
			t.Fatalf("%d machines from one token", len(ms))
		}
	})
}

func TestPortRangeExhausted(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, store.PortRange{Lo: 20000, Hi: 20002})
		e.data(t, e.bootstrap(t, e.token(t), "a"), 200)
		wantError(t, e.bootstrap(t, e.token(t), "b"), 503, "no free port left in the tunnel port range")
		if ms := e.list(t, "/api/machines"); len(ms) != 1 {
			t.Fatalf("a failed registration left a machine: %v", ms)
		}
	})
}

func (e *machinesEnv) machine(t *testing.T) (id string, agentToken string) {
	t.Helper()
	d := e.data(t, e.bootstrap(t, e.token(t), "box"), 200)
	ms := e.list(t, "/api/machines")
	return fmt.Sprint(ms[len(ms)-1].(map[string]any)["id"]), d["agent_token"].(string)
}

func TestTunnelsValidation(t *testing.T) {
	e := newMachinesEnv(t, wide)
	mid, _ := e.machine(t)
	post := func(body string) resp {
		return e.do(req{method: "POST", path: "/api/tunnels", body: body, cookie: e.cookie})
	}
	cases := []struct{ body, msg string }{
		{`{"name":"web","kind":"http","local_port":80,"subdomain":"web"}`, "machine_id is required"},
		{`{"machine_id":` + mid + `,"kind":"http","local_port":80,"subdomain":"web"}`, "name is required"},
		{`{"machine_id":` + mid + `,"name":"web","local_port":80}`, "kind is required"},
		{`{"machine_id":` + mid + `,"name":"web","kind":"sctp","local_port":80}`, `kind must be "http", "tcp" or "udp"`},
		{`{"machine_id":` + mid + `,"name":"web","kind":"http","subdomain":"web"}`, "local_port is required"},
		{`{"machine_id":` + mid + `,"name":"web","kind":"http","local_port":70000,"subdomain":"web"}`, "local_port must be between 1 and 65535"},
		{`{"machine_id":` + mid + `,"name":"web","kind":"http","local_port":80}`, "subdomain is required for http tunnels"},
		{`{"machine_id":` + mid + `,"name":"web","kind":"http","local_port":80,"subdomain":"-web"}`, "subdomain must be a hostname label: lowercase letters, digits and inner hyphens"},
		{`{"machine_id":` + mid + `,"name":"web","kind":"http","local_port":80,"subdomain":"web","public":true}`, "public is only for tcp and udp tunnels"},
		{`{"machine_id":` + mid + `,"name":"db","kind":"tcp","local_port":5432,"subdomain":"db"}`, "subdomain is only for http tunnels"},
		{`{"machine_id":` + mid + `,"name":"game","kind":"udp","local_port":27015,"subdomain":"game"}`, "subdomain is only for http tunnels"},
		{`{"machine_id":` + mid + `,"name":"game","kind":"udp","local_port":0}`, "local_port must be between 1 and 65535"},
		{`{"machine_id":` + mid + `,"name":"a b","kind":"tcp","local_port":5432}`, "name must be a hostname label: lowercase letters, digits and inner hyphens"},
		{`{"machine_id":999,"name":"db","kind":"tcp","local_port":5432}`, "machine 999 does not exist"},
	}
	for _, c := range cases {
		wantError(t, post(c.body), 400, c.msg)
	}
	if ts := e.list(t, "/api/tunnels"); len(ts) != 0 {
		t.Fatalf("invalid tunnels were stored: %v", ts)
	}
	web := e.data(t, post(`{"machine_id":`+mid+`,"name":"web","kind":"http","local_port":80,"subdomain":"Web"}`), 201)
	if web["subdomain"] != "web" || web["public"] != false || web["status"] != "pending" || web["remote_port"].(float64) < 20000 {
		t.Fatalf("tunnel = %v", web)
	}
	wantError(t, post(`{"machine_id":`+mid+`,"name":"web2","kind":"http","local_port":81,"subdomain":"web"}`), 400, "subdomain is already in use")
	wantError(t, post(`{"machine_id":`+mid+`,"name":"web","kind":"tcp","local_port":81}`), 400, "name is already in use")
	db := e.data(t, post(`{"machine_id":`+mid+`,"name":"db","kind":"tcp","local_port":5432,"public":true}`), 201)
	if db["subdomain"] != nil || db["public"] != true {
		t.Fatalf("tcp tunnel = %v", db)
	}
	game := e.data(t, post(`{"machine_id":`+mid+`,"name":"game","kind":"udp","local_port":27015,"public":true}`), 201)
	if game["kind"] != "udp" || game["subdomain"] != nil || game["public"] != true || game["address"] != fmt.Sprintf("127.0.0.1:%v", game["remote_port"]) {
		t.Fatalf("udp tunnel = %v", game)
	}
	conf := e.do(req{method: "GET", path: "/api/machines/" + mid + "/revtunnel-client", cookie: e.cookie})
	if !strings.Contains(conf.Body.String(), fmt.Sprintf("name = 'tunnel-%v'\ntype = 'udp'\nlocalIP = '127.0.0.1'\nlocalPort = 27015\nremotePort = %v\n", game["id"], game["remote_port"])) {
		t.Fatalf("client config without the udp proxy:\n%s", conf.Body)
	}
	wantError(t, e.do(req{method: "PATCH", path: "/api/tunnels/" + fmt.Sprint(game["id"]), body: `{"subdomain":"game"}`, cookie: e.cookie}), 400, "subdomain is only for http tunnels")
	e.data(t, e.do(req{method: "DELETE", path: "/api/tunnels/" + fmt.Sprint(game["id"]), cookie: e.cookie}), 200)
	id := fmt.Sprint(db["id"])
	wantError(t, e.do(req{method: "PATCH", path: "/api/tunnels/" + id, body: `{"kind":"http"}`, cookie: e.cookie}), 400, "kind cannot be changed; delete the tunnel and create another")
	wantError(t, e.do(req{method: "PATCH", path: "/api/tunnels/" + id, body: `{"local_port":0}`, cookie: e.cookie}), 400, "local_port must be between 1 and 65535")
	got := e.data(t, e.do(req{method: "PATCH", path: "/api/tunnels/" + id, body: `{"local_port":5433,"name":"pg"}`, cookie: e.cookie}), 200)
	if got["local_port"].(float64) != 5433 || got["name"] != "pg" || got["remote_port"] != db["remote_port"] {
		t.Fatalf("patched = %v", got)
	}
	wantError(t, e.do(req{method: "GET", path: "/api/tunnels/12345", cookie: e.cookie}), 404, "tunnel not found")
	wantError(t, e.do(req{method: "PATCH", path: "/api/tunnels/12345", body: `{}`, cookie: e.cookie}), 404, "tunnel not found")
	wantError(t, e.do(req{method: "DELETE", path: "/api/tunnels/abc", cookie: e.cookie}), 404, "tunnel not found")
	e.data(t, e.do(req{method: "DELETE", path: "/api/tunnels/" + id, cookie: e.cookie}), 200)
	if ts := e.list(t, "/api/tunnels?machine_id="+mid); len(ts) != 1 {
		t.Fatalf("tunnels after delete = %v", ts)
	}
}

func TestMachinesCRUDAndSelfDelete(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		id, agentToken := e.machine(t)
		wantError(t, e.do(req{method: "GET", path: "/api/machines/77", cookie: e.cookie}), 404, "machine not found")
		wantError(t, e.do(req{method: "PATCH", path: "/api/machines/" + id, body: `{}`, cookie: e.cookie}), 400, "name is required")
		wantError(t, e.do(req{method: "PATCH", path: "/api/machines/" + id, body: `{"name":"  "}`, cookie: e.cookie}), 400, "name is required")
		if d := e.data(t, e.do(req{method: "PATCH", path: "/api/machines/" + id, body: `{"name":"kitchen"}`, cookie: e.cookie}), 200); d["name"] != "kitchen" {
			t.Fatalf("renamed = %v", d)
		}
		cfg := e.do(req{method: "GET", path: "/api/machines/" + id + "/revtunnel-client", cookie: e.cookie})
		if cfg.Code != 200 || !strings.Contains(cfg.Body.String(), "name = 'ssh'") || cfg.Header().Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Fatalf("client config: %d %s", cfg.Code, cfg.Body)
		}
		wantError(t, e.do(req{method: "POST", path: "/api/machines/self-delete"}), 401, "agent token required")
		wantError(t, e.do(req{method: "POST", path: "/api/machines/self-delete", header: map[string]string{"Authorization": "Bearer nope"}}), 401, "invalid agent token")
		e.data(t, e.do(req{method: "POST", path: "/api/machines/self-delete", header: map[string]string{"Authorization": "Bearer " + agentToken}}), 200)
		wantError(t, e.do(req{method: "GET", path: "/api/machines/" + id, cookie: e.cookie}), 404, "machine not found")
		wantError(t, e.do(req{method: "POST", path: "/api/machines/self-delete", header: map[string]string{"Authorization": "Bearer " + agentToken}}), 401, "invalid agent token")

		id2, _ := e.machine(t)
		e.data(t, e.do(req{method: "POST", path: "/api/tunnels", body: `{"machine_id":` + id2 + `,"name":"db","kind":"tcp","local_port":5432}`, cookie: e.cookie}), 201)
		e.data(t, e.do(req{method: "DELETE", path: "/api/machines/" + id2, cookie: e.cookie}), 200)
		if ts := e.list(t, "/api/tunnels"); len(ts) != 0 {
			t.Fatalf("deleting the machine left tunnels: %v", ts)
		}
		wantError(t, e.do(req{method: "DELETE", path: "/api/machines/" + id2, cookie: e.cookie}), 404, "machine not found")
	})
}

func TestActivityFeed(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		base := e.now
		for i := 0; i < 30; i++ {
			for _, src := range []string{"machine", "tunnel"} {
				if err := e.st.InsertEvent(context.Background(), store.Event{CreatedAt: base.Add(time.Duration(i) * time.Second), Source: src, Kind: "k", Message: fmt.Sprintf("%s %d", src, i)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Tunnel events are older than half of the machine events: the feed
		// still carries 25 of each.
		for i := 0; i < 10; i++ {
			e.st.InsertEvent(context.Background(), store.Event{CreatedAt: base.Add(time.Hour + time.Duration(i)*time.Second), Source: "machine", Kind: "k", Message: "late"})
		}
		ev := e.list(t, "/api/local/activity")
		if len(ev) != 50 {
			t.Fatalf("%d events, want 50", len(ev))
		}
		count := map[string]int{}
		var prev time.Time
		for i, x := range ev {
			m := x.(map[string]any)
			count[m["source"].(string)]++
			at, _ := time.Parse(time.RFC3339Nano, m["created_at"].(string))
			if i > 0 && at.After(prev) {
				t.Fatalf("event %d is newer than event %d", i, i-1)
			}
			prev = at
		}
		if count["machine"] != 25 || count["tunnel"] != 25 {
			t.Fatalf("sources = %v", count)
		}
		if ev[0].(map[string]any)["message"] != "late" {
			t.Fatalf("newest = %v", ev[0])
		}
		wantError(t, e.do(req{method: "GET", path: "/api/local/activity"}), 401, "authentication required")
	})
}

// TestReconcileAndServerFile: the tunnel server's config as the daemon
// renders it, applied on request (checked by the real frps, frps
// restarted), and frps's own words when it refuses the file.
func TestReconcileAndServerFile(t *testing.T) {
	e := newMachinesEnv(t, wide)
	r := e.do(req{method: "GET", path: "/api/debug/revtunnel-server", cookie: e.cookie})
	if r.Code != 200 || r.Header().Get("Content-Type") != "text/plain; charset=utf-8" || !strings.Contains(r.Body.String(), "bindPort = 7000") {
		t.Fatalf("%d %q %s", r.Code, r.Header().Get("Content-Type"), r.Body)
	}
	wantError(t, e.do(req{method: "GET", path: "/api/debug/revtunnel-server"}), 401, "authentication required")
	path := e.cfg.SystemPath(revtunnel.ServerConfigPath)
	os.Remove(path)
	d := e.data(t, e.do(req{method: "POST", path: "/api/local/reconcile", cookie: e.cookie}), 200)
	if msg, _ := d["message"].(string); !strings.HasPrefix(msg, "revtunnel-server configuration written") || !strings.HasSuffix(msg, "and revtunnel-server restarted") {
		t.Fatal(d)
	}
	if d := e.data(t, e.do(req{method: "POST", path: "/api/local/reconcile", cookie: e.cookie}), 200); d["message"] != "revtunnel-server configuration unchanged" {
		t.Fatal(d)
	}
	// The operator writes what frps refuses into the custom block.
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// (and bindPort too, so that the file differs from what the daemon
	// renders: an unchanged file is not checked again)
	bad := strings.Replace(string(file), frpconf.CustomEnd, "maxPortsPerClient = \"many\"\n"+frpconf.CustomEnd, 1)
	bad = strings.Replace(bad, "bindPort = 7000", "bindPort = 7001", 1)
	os.WriteFile(path, []byte(bad), 0o640)
	r = e.do(req{method: "POST", path: "/api/local/reconcile", cookie: e.cookie})
	if r.Code != 500 || !strings.Contains(r.Body.String(), "reconcile failed: frps verify: ") || !strings.Contains(r.Body.String(), "maxPortsPerClient") {
		t.Fatalf("%d %s", r.Code, r.Body)
	}
	if kept, _ := os.ReadFile(path); string(kept) != bad {
		t.Fatal("a refused config replaced the file")
	}
}

func base64RawURL(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

// TestMachineListFollowsWritesAndHosts: the machine list is built once
// and handed out again between changes, yet a write shows in the very next
// list, and a request by another host gets that host's SSH command.
func TestMachineListFollowsWritesAndHosts(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		if l := e.list(t, "/api/machines"); len(l) != 0 {
			t.Fatalf("list before any machine: %v", l)
		}
		id, _ := e.machine(t)
		listed := func(host string) map[string]any {
			t.Helper()
			r := e.do(req{method: "GET", path: "/api/machines", cookie: e.cookie, header: map[string]string{"Host": host}})
			l, ok := r.json(t)["data"].([]any)
			if r.Code != 200 || !ok || len(l) != 1 {
				t.Fatalf("GET /api/machines by %s: %d %s", host, r.Code, r.Body)
			}
			return l[0].(map[string]any)
		}
		first := listed("127.0.0.1:7380")
		if again := listed("127.0.0.1:7380"); fmt.Sprint(again) != fmt.Sprint(first) {
			t.Fatalf("the same list twice differs:\n%v\n%v", first, again)
		}
		e.data(t, e.do(req{method: "PATCH", path: "/api/machines/" + id, body: `{"name":"renamed"}`, cookie: e.cookie}), 200)
		if m := listed("127.0.0.1:7380"); m["name"] != "renamed" {
			t.Fatalf("after the rename the list says %v", m["name"])
		}
		other := listed("vps.example.net:7380")
		if cmd, _ := other["ssh_command"].(string); cmd == first["ssh_command"] {
			t.Fatalf("ssh command by another host is the first host's: %q", cmd)
		}
	})
}

// TestTunnelTargets: an http tunnel served by two machines, through the
// API: what is refused (and changes nothing), what is stored and shown,
// and a PATCH that replaces the list.
func TestTunnelTargets(t *testing.T) {
	e := newMachinesEnv(t, wide)
	a, _ := e.machine(t)
	e.data(t, e.bootstrap(t, e.token(t), "standby"), 200)
	ms := e.list(t, "/api/machines")
	b := fmt.Sprint(ms[len(ms)-1].(map[string]any)["id"])
	post := func(body string) resp {
		return e.do(req{method: "POST", path: "/api/tunnels", body: body, cookie: e.cookie})
	}
	two := `"targets":[{"machine_id":` + a + `,"local_port":8080},{"machine_id":` + b + `,"local_port":8081}]`
	for _, c := range []struct{ body, msg string }{
		{`{"machine_id":` + a + `,"name":"db","kind":"tcp","local_port":5432,` + two + `}`, "targets are only for http tunnels"},
		{`{"machine_id":` + a + `,"name":"db","kind":"tcp","local_port":5432,"balance":"failover"}`, "balance is only for http tunnels"},
		{`{"machine_id":` + a + `,"name":"db","kind":"udp","local_port":53,"health":{"path":"/"}}`, "health is only for http tunnels"},
		{`{"name":"web","kind":"http","subdomain":"web","targets":[]}`, "machine_id is required"},
		{`{"machine_id":` + b + `,"name":"web","kind":"http","subdomain":"web",` + two + `}`, "targets[0] must be the tunnel's own machine (" + b + ")"},
		{`{"machine_id":` + a + `,"name":"web","kind":"http","subdomain":"web","local_port":9,` + two + `}`, "local_port and targets[0].local_port differ"},
		{`{"name":"web","kind":"http","subdomain":"web","targets":[{"machine_id":` + a + `,"local_port":8080},{"machine_id":999,"local_port":1}]}`, "targets[1]: machine 999 does not exist"},
		{`{"name":"web","kind":"http","subdomain":"web","targets":[{"machine_id":` + a + `,"local_port":8080},{"machine_id":` + b + `,"local_port":0}]}`, "targets[1].local_port must be between 1 and 65535"},
		{`{"name":"web","kind":"http","subdomain":"web","targets":[{"machine_id":` + a + `,"local_port":8080},{"machine_id":` + a + `,"local_port":8080}]}`, "targets[1] repeats targets[0]"},
		{`{"name":"web","kind":"http","subdomain":"web",` + two + `,"balance":"random"}`, `balance must be "failover" or "round_robin"`},
		{`{"name":"web","kind":"http","subdomain":"web",` + two + `,"health":{"path":"healthz"}}`, "health.path must start with / and hold only letters, digits and . _ ~ % / = & ? - (at most 200 characters)"},
		{`{"name":"web","kind":"http","subdomain":"web",` + two + `,"health":{"path":"/h","interval_s":4000}}`, "health.interval_s must be between 1 and 3600"},
		{`{"name":"web","kind":"http","subdomain":"web",` + two + `,"health":{"path":"/h","expect_status":42}}`, "health.expect_status must be an HTTP status between 100 and 599"},
	} {
		wantError(t, post(c.body), 400, c.msg)
	}
	if ts := e.list(t, "/api/tunnels"); len(ts) != 0 {
		t.Fatalf("refused tunnels were stored: %v", ts)
	}
	web := e.data(t, post(`{"name":"web","kind":"http","subdomain":"web",`+two+`,"balance":"round_robin","health":{"path":"/healthz"}}`), 201)
	targets := web["targets"].([]any)
	first, second := targets[0].(map[string]any), targets[1].(map[string]any)
	if fmt.Sprint(web["machine_id"]) != a || web["local_port"].(float64) != 8080 || web["balance"] != "round_robin" ||
		fmt.Sprint(web["health"]) != "map[expect_status:0 interval_s:10 path:/healthz]" || len(targets) != 2 ||
		first["remote_port"] != web["remote_port"] || fmt.Sprint(second["machine_id"]) != b || second["machine_name"] != "standby" ||
		second["status"] != "pending" || second["remote_port"] == first["remote_port"] {
		t.Fatalf("tunnel = %v", web)
	}
	if h := second["health"].(map[string]any); h["state"] != "unknown" || h["message"] != "not checked yet" {
		t.Fatalf("health before any check = %v", h)
	}
	// The standby's page lists what it serves of web; the tunnel's own
	// machine lists nothing there (web is its own tunnel).
	serves := e.data(t, e.do(req{method: "GET", path: "/api/machines/" + b, cookie: e.cookie}), 200)["serves"].([]any)
	if len(serves) != 1 {
		t.Fatalf("standby serves = %v", serves)
	}
	if p := serves[0].(map[string]any); fmt.Sprint(p["tunnel_id"]) != fmt.Sprint(web["id"]) || p["tunnel_name"] != "web" ||
		p["local_port"].(float64) != 8081 || p["remote_port"] != second["remote_port"] || p["status"] != "pending" {
		t.Fatalf("standby's part = %v", p)
	}
	if own := e.data(t, e.do(req{method: "GET", path: "/api/machines/" + a, cookie: e.cookie}), 200); own["serves"] != nil {
		t.Fatalf("the tunnel's own machine lists a part: %v", own["serves"])
	}
	conf := e.do(req{method: "GET", path: "/api/machines/" + b + "/revtunnel-client", cookie: e.cookie})
	if !strings.Contains(conf.Body.String(), fmt.Sprintf("localPort = 8081\nremotePort = %v\n", second["remote_port"])) {
		t.Fatalf("standby's config does not open its part:\n%s", conf.Body)
	}
	id := fmt.Sprint(web["id"])
	// A refused PATCH changes nothing.
	wantError(t, e.do(req{method: "PATCH", path: "/api/tunnels/" + id, body: `{"targets":[{"machine_id":` + b + `,"local_port":1}]}`, cookie: e.cookie}),
		400, "targets[0] must be the tunnel's own machine ("+a+")")
	got := e.data(t, e.do(req{method: "PATCH", path: "/api/tunnels/" + id, body: `{"targets":[{"machine_id":` + a + `,"local_port":8090}],"health":{"path":""}}`, cookie: e.cookie}), 200)
	if len(got["targets"].([]any)) != 1 || got["local_port"].(float64) != 8090 || got["health"] != nil {
		t.Fatalf("after the PATCH: %v", got)
	}
	if h := got["targets"].([]any)[0].(map[string]any)["health"].(map[string]any); !strings.HasPrefix(h["message"].(string), "no health check is set") {
		t.Fatalf("health without a check = %v", h)
	}
	conf = e.do(req{method: "GET", path: "/api/machines/" + b + "/revtunnel-client", cookie: e.cookie})
	if strings.Contains(conf.Body.String(), "target-") {
		t.Fatalf("standby's config still opens a part:\n%s", conf.Body)
	}
}

// TestTunnelDomains: an http tunnel's own domains through the API: what is
// refused (400 for a bad name, 409 for a name the dashboard or another
// tunnel has) and changes nothing, the record to create, and the DNS check.
func TestTunnelDomains(t *testing.T) {
	dns := testutil.DNSServer(t, map[string]string{"router.example.com.": "203.0.113.10", "app.example.org.": "203.0.113.10", "elsewhere.example.org.": "198.51.100.7"})
	e := newMachinesEnvWith(t, sqliteEngine, wide, func(c *config.Config) { c.DNSServer = dns })
	e.expose(t, machines.Exposure{Domain: "example.com"})
	mid, _ := e.machine(t)
	post := func(body string) resp {
		return e.do(req{method: "POST", path: "/api/tunnels", body: body, cookie: e.cookie})
	}
	wiki := e.data(t, post(`{"machine_id":`+mid+`,"name":"wiki","kind":"http","local_port":80,"subdomain":"wiki","domains":["Wiki.Example.NET."]}`), 201)
	if d := wiki["domains"].([]any)[0].(map[string]any); d["name"] != "wiki.example.net" || d["url"] != "https://wiki.example.net" ||
		d["dns"] != "a CNAME record wiki.example.net → router.example.com (or an A/AAAA record with the same address as router.example.com)" {
		t.Fatalf("domain = %v", d)
	}
	for _, c := range []struct {
		body   string
		status int
		msg    string
	}{
		{`"kind":"tcp","local_port":81,"domains":["a.example.org"]`, 400, "domains are only for http tunnels"},
		{`"kind":"http","local_port":81,"subdomain":"app","domains":["localhost"]`, 400, `domains[0] "localhost" is not a fully qualified domain name`},
		{`"kind":"http","local_port":81,"subdomain":"app","domains":["a b.org"]`, 400, `domains[0] "a b.org" is not a fully qualified domain name`},
		{`"kind":"http","local_port":81,"subdomain":"app","domains":["a.example.org","A.example.org"]`, 400, "domains[1] repeats domains[0]"},
		{`"kind":"http","local_port":81,"subdomain":"app","domains":["app.example.com"]`, 400, "app.example.com is already this tunnel's address"},
		{`"kind":"http","local_port":81,"subdomain":"app","domains":["blog.example.com"]`, 400, `blog.example.com is under this server's domain: make "blog" the tunnel's subdomain instead`},
		{`"kind":"http","local_port":81,"subdomain":"app","domains":["router.example.com"]`, 409, "router.example.com is the dashboard's address"},
		{`"kind":"http","local_port":81,"subdomain":"app","domains":["wiki.example.com"]`, 409, `wiki.example.com is the address of tunnel "wiki"`},
		{`"kind":"http","local_port":81,"subdomain":"app","domains":["wiki.example.net"]`, 409, `domain wiki.example.net is already used by tunnel "wiki"`},
	} {
		wantError(t, post(`{"machine_id":`+mid+`,"name":"app",`+c.body+`}`), c.status, c.msg)
	}
	if ts := e.list(t, "/api/tunnels"); len(ts) != 1 {
		t.Fatalf("refused tunnels were stored: %v", ts)
	}
	app := e.data(t, post(`{"machine_id":`+mid+`,"name":"app","kind":"http","local_port":81,"subdomain":"app","domains":["app.example.org","elsewhere.example.org","nowhere.example.org"]}`), 201)
	id := fmt.Sprint(app["id"])
	// Taking another tunnel's domain by PATCH is refused too, and changes nothing.
	wantError(t, e.do(req{method: "PATCH", path: "/api/tunnels/" + id, body: `{"domains":["wiki.example.net"]}`, cookie: e.cookie}), 409,
		`domain wiki.example.net is already used by tunnel "wiki"`)
	r := e.do(req{method: "GET", path: "/api/tunnels/" + id + "/dns", cookie: e.cookie})
	if r.Code != 200 {
		t.Fatalf("dns: %d %s", r.Code, r.Body)
	}
	got := fmt.Sprint(r.json(t)["data"])
	for _, want := range []string{
		"map[domain:app.example.org ok:true resolved_to:203.0.113.10]",
		"map[domain:elsewhere.example.org message:elsewhere.example.org resolves to 198.51.100.7, not to this server (router.example.com is 203.0.113.10): add a CNAME record elsewhere.example.org → router.example.com (or an A/AAAA record with this server's address) ok:false resolved_to:198.51.100.7]",
		"map[domain:nowhere.example.org message:nowhere.example.org does not resolve: add a CNAME record nowhere.example.org → router.example.com (or an A/AAAA record with this server's address) ok:false]",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("dns answer %s\nlacks %s", got, want)
		}
	}
	wantError(t, e.do(req{method: "GET", path: "/api/tunnels/" + fmt.Sprint(e.data(t, post(`{"machine_id":`+mid+`,"name":"db","kind":"tcp","local_port":5432}`), 201)["id"]) + "/dns", cookie: e.cookie}),
		400, "only http tunnels have domains")
	patched := e.data(t, e.do(req{method: "PATCH", path: "/api/tunnels/" + id, body: `{"domains":[]}`, cookie: e.cookie}), 200)
	if patched["domains"] != nil {
		t.Fatalf("domains after clearing them: %v", patched["domains"])
	}
	// Now free, the name can go to another tunnel.
	e.data(t, e.do(req{method: "PATCH", path: "/api/tunnels/" + fmt.Sprint(wiki["id"]), body: `{"domains":["wiki.example.net","app.example.org"]}`, cookie: e.cookie}), 200)
}

// TestMachineListPages: GET /api/machines with limit and a cursor gives
// every machine once, in id order; q and state are applied on the server,
// and page.counts are the whole fleet's. A query it does not understand is
// refused in words.
func TestMachineListPages(t *testing.T) {
	e := newMachinesEnv(t, wide)
	names := []string{"nas-office", "nas-home", "pi-garage", "pi-attic", "web-1", "web-2", "db-main"}
	ids := map[string]int64{}
	for _, n := range names {
		if r := e.bootstrap(t, e.token(t), n); r.Code != 200 {
			t.Fatalf("bootstrap %s: %d %s", n, r.Code, r.Body)
		}
	}
	for _, m := range e.list(t, "/api/machines") {
		m := m.(map[string]any)
		ids[m["name"].(string)] = int64(m["id"].(float64))
	}
	for _, n := range []string{"nas-home", "web-2"} {
		if err := e.app.Store.SetMachineStatus(context.Background(), ids[n], "online", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	type page struct {
		Data []struct {
			ID   int64  `json:"id"`
			Name string `json:"name"`
		} `json:"data"`
		Page struct {
			Matched    int             `json:"matched"`
			NextCursor string          `json:"next_cursor"`
			Counts     machines.Counts `json:"counts"`
		} `json:"page"`
	}
	get := func(query string) page {
		t.Helper()
		r := e.do(req{method: "GET", path: "/api/machines?" + query, cookie: e.cookie})
		var p page
		if r.Code != 200 || json.Unmarshal(r.Body.Bytes(), &p) != nil {
			t.Fatalf("GET /api/machines?%s: %d %s", query, r.Code, r.Body)
		}
		return p
	}
	// Pages of 3: every machine once, oldest first.
	var seen []string
	cursor := ""
	for i := 0; ; i++ {
		p := get("limit=3&cursor=" + cursor)
		if len(p.Data) > 3 || p.Page.Matched != len(names) || p.Page.Counts.All != len(names) || p.Page.Counts.Online != 2 {
			t.Fatalf("page %d: %+v", i, p)
		}
		for _, m := range p.Data {
			seen = append(seen, m.Name)
		}
		if cursor = p.Page.NextCursor; cursor == "" {
			break
		}
		if i > 5 {
			t.Fatalf("more pages than machines: %v", seen)
		}
	}
	if strings.Join(seen, " ") != strings.Join(names, " ") {
		t.Fatalf("pages gave %v, want %v", seen, names)
	}
	// The search and the state, on the server.
	p := get("q=NAS")
	if len(p.Data) != 2 || p.Data[0].Name != "nas-office" || p.Data[1].Name != "nas-home" || p.Page.Matched != 2 || p.Page.NextCursor != "" {
		t.Fatalf("q=NAS: %+v", p)
	}
	if p = get("q=web&state=online"); len(p.Data) != 1 || p.Data[0].Name != "web-2" || p.Page.Counts.All != len(names) {
		t.Fatalf("q=web&state=online: %+v", p)
	}
	if p = get("q=nothing-like-this"); len(p.Data) != 0 || p.Page.Matched != 0 {
		t.Fatalf("a search that matches nothing: %+v", p)
	}
	// Without a query: every machine, as before pages.
	if l := e.list(t, "/api/machines"); len(l) != len(names) {
		t.Fatalf("the whole list: %d machines", len(l))
	}
	for query, want := range map[string]string{
		"limit=0":           "limit must be a whole number from 1 to 500",
		"limit=501":         "limit must be a whole number from 1 to 500",
		"limit=ten":         "limit must be a whole number from 1 to 500",
		"cursor=abc":        `cursor "abc" is not one this list gave: start again without it`,
		"state=sleeping":    "state must be one of: online, offline, pending, outdated",
		"limit=5&sort=name": `unknown query parameter "sort": the machine list takes limit, cursor, q and state`,
	} {
		r := e.do(req{method: "GET", path: "/api/machines?" + query, cookie: e.cookie})
		var body struct{ Error string }
		json.Unmarshal(r.Body.Bytes(), &body)
		if r.Code != 400 || body.Error != want {
			t.Errorf("GET /api/machines?%s: %d %s; want 400 %q", query, r.Code, r.Body, want)
		}
	}
}

// GET /api/tunnels takes the machine list's pages, with the kind and the
// state as filters, and machine_id as before.
func TestTunnelListPages(t *testing.T) {
	e := newMachinesEnv(t, wide)
	mids := map[string]string{}
	for _, n := range []string{"nas", "pi"} {
		if r := e.bootstrap(t, e.token(t), n); r.Code != 200 {
			t.Fatalf("bootstrap %s: %d %s", n, r.Code, r.Body)
		}
	}
	for _, m := range e.list(t, "/api/machines") {
		m := m.(map[string]any)
		mids[m["name"].(string)] = fmt.Sprint(m["id"])
	}
	tunnels := []struct{ machine, body string }{
		{"nas", `"name":"photos","kind":"http","subdomain":"photos","local_port":2342`},
		{"nas", `"name":"files","kind":"tcp","local_port":445`},
		{"nas", `"name":"grafana","kind":"http","subdomain":"grafana","local_port":3000`},
		{"pi", `"name":"dns","kind":"udp","local_port":53`},
		{"pi", `"name":"home","kind":"http","subdomain":"home","local_port":8123`},
	}
	ids := map[string]string{}
	for _, x := range tunnels {
		tn := e.data(t, e.do(req{method: "POST", path: "/api/tunnels", body: `{"machine_id":` + mids[x.machine] + `,` + x.body + `}`, cookie: e.cookie}), 201)
		ids[tn["name"].(string)] = fmt.Sprint(tn["id"])
	}
	e.data(t, e.do(req{method: "PATCH", path: "/api/tunnels/" + ids["grafana"], body: `{"paused":true}`, cookie: e.cookie}), 200)
	type page struct {
		Data []struct {
			Name string `json:"name"`
		} `json:"data"`
		Page struct {
			Matched    int                   `json:"matched"`
			NextCursor string                `json:"next_cursor"`
			Counts     machines.TunnelCounts `json:"counts"`
		} `json:"page"`
	}
	get := func(query string) (names string, p page) {
		t.Helper()
		r := e.do(req{method: "GET", path: "/api/tunnels?" + query, cookie: e.cookie})
		if r.Code != 200 || json.Unmarshal(r.Body.Bytes(), &p) != nil {
			t.Fatalf("GET /api/tunnels?%s: %d %s", query, r.Code, r.Body)
		}
		var ns []string
		for _, d := range p.Data {
			ns = append(ns, d.Name)
		}
		return strings.Join(ns, " "), p
	}
	// Pages of 2: every tunnel once, oldest first; the counts of all.
	var seen []string
	cursor := ""
	for i := 0; ; i++ {
		names, p := get("limit=2&cursor=" + cursor)
		if len(p.Data) > 2 || p.Page.Matched != 5 || p.Page.Counts.All != 5 || p.Page.Counts.Paused != 1 {
			t.Fatalf("page %d: %+v", i, p)
		}
		seen = append(seen, names)
		if cursor = p.Page.NextCursor; cursor == "" {
			break
		}
		if i > 3 {
			t.Fatalf("more pages than tunnels: %v", seen)
		}
	}
	if got := strings.Join(seen, " "); got != "photos files grafana dns home" {
		t.Fatalf("pages gave %q", got)
	}
	for query, want := range map[string]string{
		"q=NAS":                              "photos files grafana", // the machine's name
		"kind=http":                          "photos grafana home",
		"kind=http&machine_id=" + mids["pi"]: "home",
		"state=paused":                       "grafana",
		"q=8123":                             "home",
		"q=grafana&state=paused":             "grafana",
		"q=nothing-like-this":                "",
	} {
		if names, p := get(query); names != want || p.Page.Matched != len(strings.Fields(want)) {
			t.Errorf("GET /api/tunnels?%s: %q (%+v), want %q", query, names, p.Page, want)
		}
	}
	if names, p := get("machine_id=" + mids["pi"] + "&limit=10"); names != "dns home" || p.Page.Matched != 2 || p.Page.Counts.All != 5 {
		t.Errorf("one machine's tunnels: %q %+v; want its two, and the counts of all", names, p.Page)
	}
	// machine_id alone, or nothing: the whole list, as before pages.
	if l := e.list(t, "/api/tunnels?machine_id="+mids["nas"]); len(l) != 3 {
		t.Fatalf("nas's tunnels: %d", len(l))
	}
	if l := e.list(t, "/api/tunnels"); len(l) != 5 {
		t.Fatalf("the whole list: %d tunnels", len(l))
	}
	for query, want := range map[string]string{
		"limit=501":  "limit must be a whole number from 1 to 500",
		"cursor=x":   `cursor "x" is not one this list gave: start again without it`,
		"kind=ftp":   "kind must be one of: http, tcp, udp",
		"state=gone": "state must be one of: active, pending, error, offline, paused, up, down, unknown",
		"sort=name":  `unknown query parameter "sort": the tunnel list takes limit, cursor, q, kind, state and machine_id`,
	} {
		r := e.do(req{method: "GET", path: "/api/tunnels?" + query, cookie: e.cookie})
		var body struct{ Error string }
		json.Unmarshal(r.Body.Bytes(), &body)
		if r.Code != 400 || body.Error != want {
			t.Errorf("GET /api/tunnels?%s: %d %s; want 400 %q", query, r.Code, r.Body, want)
		}
	}
}

// TestTunnelProxyProtocol: proxy_protocol through the API. What is refused
// changes nothing; a tcp or udp tunnel's header is asked of the machine's
// tunnel client, an http tunnel's is not (the edge writes it).
func TestTunnelProxyProtocol(t *testing.T) {
	e := newMachinesEnv(t, wide)
	mid, _ := e.machine(t)
	post := func(body string) resp {
		return e.do(req{method: "POST", path: "/api/tunnels", body: body, cookie: e.cookie})
	}
	for _, c := range []struct{ body, msg string }{
		{`{"machine_id":` + mid + `,"name":"db","kind":"tcp","local_port":5432,"proxy_protocol":"v3"}`, `proxy_protocol must be "" (none), "v1" or "v2"`},
		{`{"machine_id":` + mid + `,"name":"db","kind":"tcp","local_port":5432,"proxy_protocol":"V2"}`, `proxy_protocol must be "" (none), "v1" or "v2"`},
		{`{"machine_id":` + mid + `,"name":"dns","kind":"udp","local_port":53,"proxy_protocol":"v1"}`, `proxy_protocol "v1" cannot carry udp datagrams: use "v2", or "" for none`},
		{`{"machine_id":` + mid + `,"name":"db","kind":"tcp","local_port":5432,"proxy_protocol":2}`, ""},
	} {
		wantError(t, post(c.body), 400, c.msg)
	}
	if ts := e.list(t, "/api/tunnels"); len(ts) != 0 {
		t.Fatalf("refused tunnels were stored: %v", ts)
	}
	db := e.data(t, post(`{"machine_id":`+mid+`,"name":"db","kind":"tcp","local_port":5432,"proxy_protocol":"v1"}`), 201)
	dns := e.data(t, post(`{"machine_id":`+mid+`,"name":"dns","kind":"udp","local_port":53,"proxy_protocol":"v2"}`), 201)
	web := e.data(t, post(`{"machine_id":`+mid+`,"name":"web","kind":"http","local_port":80,"subdomain":"web","proxy_protocol":"v2"}`), 201)
	plain := e.data(t, post(`{"machine_id":`+mid+`,"name":"ssh2","kind":"tcp","local_port":2222}`), 201)
	for _, c := range []struct {
		tun  map[string]any
		want string
	}{{db, "v1"}, {dns, "v2"}, {web, "v2"}, {plain, ""}} {
		if c.tun["proxy_protocol"] != c.want {
			t.Fatalf("tunnel %v: proxy_protocol = %#v, want %q", c.tun["name"], c.tun["proxy_protocol"], c.want)
		}
	}
	proxyOf := func(conf string, tun map[string]any) string {
		name := fmt.Sprintf("name = 'tunnel-%v'", tun["id"])
		i := strings.Index(conf, name)
		if i < 0 {
			t.Fatalf("no proxy %s in:\n%s", name, conf)
		}
		rest := conf[i:]
		if j := strings.Index(rest[1:], "[[proxies]]"); j >= 0 {
			rest = rest[:j+1]
		}
		return rest
	}
	conf := e.do(req{method: "GET", path: "/api/machines/" + mid + "/revtunnel-client", cookie: e.cookie}).Body.String()
	for _, c := range []struct {
		tun  map[string]any
		want string
	}{{db, "proxyProtocolVersion = 'v1'"}, {dns, "proxyProtocolVersion = 'v2'"}} {
		if p := proxyOf(conf, c.tun); !strings.Contains(p, "[proxies.transport]\n"+c.want+"\n") {
			t.Fatalf("the client config's proxy for %v lacks %s:\n%s", c.tun["name"], c.want, p)
		}
	}
	for _, tun := range []map[string]any{web, plain} {
		if p := proxyOf(conf, tun); strings.Contains(p, "proxyProtocolVersion") {
			t.Fatalf("the client config asks frpc for a header on %v:\n%s", tun["name"], p)
		}
	}
	// A refused PATCH changes nothing; "" turns the header off.
	dbPath := fmt.Sprintf("/api/tunnels/%v", db["id"])
	wantError(t, e.do(req{method: "PATCH", path: fmt.Sprintf("/api/tunnels/%v", dns["id"]), body: `{"proxy_protocol":"v1"}`, cookie: e.cookie}), 400,
		`proxy_protocol "v1" cannot carry udp datagrams: use "v2", or "" for none`)
	if got := e.data(t, e.do(req{method: "GET", path: fmt.Sprintf("/api/tunnels/%v", dns["id"]), cookie: e.cookie}), 200); got["proxy_protocol"] != "v2" {
		t.Fatalf("after a refused PATCH: %v", got)
	}
	if got := e.data(t, e.do(req{method: "PATCH", path: dbPath, body: `{"proxy_protocol":""}`, cookie: e.cookie}), 200); got["proxy_protocol"] != "" {
		t.Fatalf("after turning it off: %v", got)
	}
	conf = e.do(req{method: "GET", path: "/api/machines/" + mid + "/revtunnel-client", cookie: e.cookie}).Body.String()
	if p := proxyOf(conf, db); strings.Contains(p, "proxyProtocolVersion") {
		t.Fatalf("turned off, the header is still asked for:\n%s", p)
	}
}

// TestBypassTokensAPI: an http tunnel's bypass tokens through the API.
// What is refused changes nothing; the secret is in the creating answer
// only; each change is audited by name.
func TestBypassTokensAPI(t *testing.T) {
	e := newMachinesEnv(t, wide)
	mid, _ := e.machine(t)
	web := e.data(t, e.do(req{method: "POST", path: "/api/tunnels", cookie: e.cookie,
		body: `{"machine_id":` + mid + `,"name":"app","kind":"http","local_port":80,"subdomain":"app","access":"password","password":"a long shared passphrase"}`}), 201)
	db := e.data(t, e.do(req{method: "POST", path: "/api/tunnels", cookie: e.cookie,
		body: `{"machine_id":` + mid + `,"name":"db","kind":"tcp","local_port":5432}`}), 201)
	path := fmt.Sprintf("/api/tunnels/%v/bypass-tokens", web["id"])
	post := func(body string) resp { return e.do(req{method: "POST", path: path, body: body, cookie: e.cookie}) }
	_, last := auditAfter(t, e.testEnv, e.cookie, 0)
	for _, c := range []struct {
		path, body string
		status     int
		msg        string
	}{
		{path, `{"name":""}`, 400, "name must be 1 to 64 letters, digits, '.', '_' or '-'"},
		{path, `{"name":"my app"}`, 400, "name must be 1 to 64 letters, digits, '.', '_' or '-'"},
		{path, `{"name":"ios","expires_in_days":0}`, 400, "expires_in_days must be between 1 and 730"},
		{path, `{"name":"ios","expires_in_days":731}`, 400, "expires_in_days must be between 1 and 730"},
		{path, `{"name":"ios","scope":"all"}`, 400, ""},
		{fmt.Sprintf("/api/tunnels/%v/bypass-tokens", db["id"]), `{"name":"ios"}`, 400,
			`tunnel "db" is a tcp tunnel: bypass tokens and visitor sessions are for http tunnels`},
		{"/api/tunnels/999/bypass-tokens", `{"name":"ios"}`, 404, "tunnel not found"},
	} {
		wantError(t, e.do(req{method: "POST", path: c.path, body: c.body, cookie: e.cookie}), c.status, c.msg)
	}
	if list := e.list(t, path); len(list) != 0 {
		t.Fatalf("refused tokens were stored: %v", list)
	}
	made := e.data(t, post(`{"name":"ios","expires_in_days":30}`), 201)
	secret, _ := made["token"].(string)
	if !strings.HasPrefix(secret, "tsvcbt_") || made["name"] != "ios" || made["expired"] != false {
		t.Fatalf("made %v", made)
	}
	wantError(t, post(`{"name":"ios"}`), 409, `tunnel "app" already has a bypass token named "ios"`)
	list := e.list(t, path)
	if len(list) != 1 || list[0].(map[string]any)["token"] != nil {
		t.Fatalf("the list shows a secret or the wrong tokens: %v", list)
	}
	if logs := e.do(req{method: "GET", path: "/api/security/logs", cookie: e.cookie}); logs.Code != 200 || strings.Contains(logs.Body.String(), secret) {
		t.Fatal("the audit log holds the secret")
	}
	id := fmt.Sprint(list[0].(map[string]any)["id"])
	wantError(t, e.do(req{method: "DELETE", path: path + "/999", cookie: e.cookie}), 404, "bypass token not found")
	if r := e.do(req{method: "DELETE", path: path + "/" + id, cookie: e.cookie}); r.Code != 200 {
		t.Fatalf("revoke: %d %s", r.Code, r.Body)
	}
	if r := e.do(req{method: "DELETE", path: fmt.Sprintf("/api/tunnels/%v/sessions", web["id"]), cookie: e.cookie}); r.Code != 200 {
		t.Fatalf("sign everyone out: %d %s", r.Code, r.Body)
	}
	got, _ := auditAfter(t, e.testEnv, e.cookie, last)
	want := []auditRow{
		{"BYPASS_TOKEN_CREATED", `bypass token "ios" for tunnel "app", expires ` + made["expires_at"].(string)[:10]},
		{"BYPASS_TOKEN_REVOKED", `bypass token "ios" of tunnel "app" revoked`},
		{"TUNNEL_VISITORS_SIGNED_OUT", `every visitor of tunnel "app" signed out`},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("audit rows\n got %q\nwant %q", got, want)
	}
}

// TestTunnelFallback: an http tunnel's fallback page through the API;
// what is refused changes nothing, and "" removes it.
func TestTunnelFallback(t *testing.T) {
	e := newMachinesEnv(t, wide)
	mid, _ := e.machine(t)
	web := e.data(t, e.do(req{method: "POST", path: "/api/tunnels", cookie: e.cookie,
		body: `{"machine_id":` + mid + `,"name":"shop","kind":"http","local_port":80,"subdomain":"shop","fallback":{"message":"Back soon.\nThanks."}}`}), 201)
	if fmt.Sprint(web["fallback"]) != "map[message:Back soon.\nThanks.]" {
		t.Fatalf("made %v", web)
	}
	path := fmt.Sprintf("/api/tunnels/%v", web["id"])
	long := strings.Repeat("é", 501)
	for _, c := range []struct{ path, method, body, msg string }{
		{"/api/tunnels", "POST", `{"machine_id":` + mid + `,"name":"db","kind":"tcp","local_port":5432,"fallback":{"message":"x"}}`, "fallback is only for http tunnels"},
		{path, "PATCH", `{"fallback":{"message":"` + long + `"}}`, "fallback.message must be text of at most 500 characters"},
		{path, "PATCH", `{"fallback":{"message":"a\u0007b"}}`, "fallback.message may hold letters, punctuation and line breaks, not control characters"},
		{path, "PATCH", `{"fallback":{"text":"x"}}`, ""},
	} {
		wantError(t, e.do(req{method: c.method, path: c.path, body: c.body, cookie: e.cookie}), 400, c.msg)
	}
	if got := e.data(t, e.do(req{method: "GET", path: path, cookie: e.cookie}), 200); fmt.Sprint(got["fallback"]) != "map[message:Back soon.\nThanks.]" {
		t.Fatalf("after refused changes: %v", got["fallback"])
	}
	if got := e.data(t, e.do(req{method: "PATCH", path: path, body: `{"fallback":{"message":""}}`, cookie: e.cookie}), 200); got["fallback"] != nil {
		t.Fatalf("removed, it still shows: %v", got["fallback"])
	}
}
