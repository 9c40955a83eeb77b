package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/bundle"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// clientSys is a System that runs several clients.
type clientSys struct {
	fakeSys
	sets []string
}

func (c *clientSys) ApplyClients(_ context.Context, set []byte) error {
	c.calls = append(c.calls, "apply-clients")
	c.sets = append(c.sets, string(set))
	return nil
}

func setJSON(t *testing.T, set agent.ClientSet) string {
	t.Helper()
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPutClients: an agent that runs several clients says so in its
// status and takes a set; a bad set is a 400 in words and changes nothing;
// an agent that runs one client answers 404 and does not list it.
func TestPutClients(t *testing.T) {
	sys := &clientSys{fakeSys: fakeSys{state: map[string]string{"ActiveState": "active"}}}
	srv := &agent.Server{Token: token, Unit: "revtunnel-client.service", Version: "v1", Sys: sys, Later: func(f func()) { f() }}
	if code, body := do(t, srv, "GET", "/status", ""); code != 200 || !strings.Contains(body, `"capabilities":["edges","reconnect","speedtest"]`) {
		t.Fatalf("status: %d %s", code, body)
	}
	good := agent.ClientSet{Generation: 7, Primary: agent.WithGeneration(goodConfig, 7),
		Edges: []agent.EdgeClient{{Edge: "edge-b", Config: agent.WithGeneration(goodConfig, 7)}}}
	for _, c := range []struct {
		name string
		set  agent.ClientSet
		raw  string
		want string
	}{
		{name: "a path for a name", set: agent.ClientSet{Primary: goodConfig, Edges: []agent.EdgeClient{{Edge: "../../etc/x", Config: goodConfig}}}, want: "an edge name has only lower-case letters"},
		{name: "twice", set: agent.ClientSet{Primary: goodConfig, Edges: []agent.EdgeClient{{Edge: "b", Config: goodConfig}, {Edge: "b", Config: goodConfig}}}, want: `names edge \"b\" twice`},
		{name: "no primary", set: agent.ClientSet{Edges: []agent.EdgeClient{{Edge: "b", Config: goodConfig}}}, want: "no primary config"},
		{name: "empty edge", set: agent.ClientSet{Primary: goodConfig, Edges: []agent.EdgeClient{{Edge: "b"}}}, want: `edge \"b\" has an empty config`},
		{name: "unknown field", raw: `{"primary":"x","extra":1}`, want: "not JSON of the expected shape"},
		{name: "reconnect an edge not in the set", set: agent.ClientSet{Primary: goodConfig, Edges: []agent.EdgeClient{{Edge: "b", Config: goodConfig}},
			Reconnect: []string{"c"}}, want: `asks to reconnect edge \"c\", which it does not name`},
	} {
		body := c.raw
		if body == "" {
			body = setJSON(t, c.set)
		}
		code, ans := do(t, srv, "PUT", "/clients", body)
		if code != 400 || !strings.Contains(ans, c.want) || !strings.Contains(ans, "the installed clients are kept") {
			t.Fatalf("%s: %d %s, want 400 with %q", c.name, code, ans, c.want)
		}
	}
	if len(sys.sets) != 0 {
		t.Fatalf("a refused set was applied: %v", sys.sets)
	}
	code, ans := do(t, srv, "PUT", "/clients", setJSON(t, good))
	if code != 200 || !strings.Contains(ans, `"generation":7`) || !strings.Contains(ans, "1 other edge client(s) (edge-b)") {
		t.Fatalf("good set: %d %s", code, ans)
	}
	if len(sys.sets) != 1 {
		t.Fatalf("applied %d sets", len(sys.sets))
	}
	if _, body := do(t, srv, "GET", "/status", ""); !strings.Contains(body, `"config_generation":7`) {
		t.Fatalf("status after the set: %s", body)
	}

	one := &agent.Server{Token: token, Unit: "revtunnel-client.service", Version: "v1", Sys: &fakeSys{state: map[string]string{}}}
	if code, body := do(t, one, "PUT", "/clients", setJSON(t, good)); code != 404 || !strings.Contains(body, "one tunnel client only") {
		t.Fatalf("one-client agent: %d %s", code, body)
	}
	if _, body := do(t, one, "GET", "/status", ""); strings.Contains(body, "edges") {
		t.Fatalf("one-client agent lists edges: %s", body)
	}
}

// TestClientsApplierRealFRPC installs sets with the real frpc verify: new
// edges get their config beside client.toml (its owner and mode), the unit
// template and a start; an unchanged server is a reload, a new one a
// restart; an edge that left is stopped and its file removed; a refused
// config of one edge leaves the others applied and says which.
func TestClientsApplierRealFRPC(t *testing.T) {
	_, frpc := testutil.FRP()
	dir, units := t.TempDir(), t.TempDir()
	primary := filepath.Join(dir, "client.toml")
	if err := os.WriteFile(primary, []byte(goodConfig), 0o640); err != nil {
		t.Fatal(err)
	}
	var calls []string
	active := map[string]bool{}
	a := agent.ClientsApplier{FRPC: frpc, Dir: dir, UnitDir: units,
		Systemctl: func(_ context.Context, args ...string) (string, error) {
			calls = append(calls, strings.Join(args, " "))
			switch args[0] {
			case "is-active":
				if !active[args[len(args)-1]] {
					return "inactive", &os.PathError{Op: "is-active", Path: args[len(args)-1], Err: syscall.ESRCH}
				}
			case "restart":
				active[args[1]] = true
			case "disable":
				delete(active, args[len(args)-1])
			}
			return "", nil
		},
		Reload: func(_ context.Context, path string) (string, error) {
			calls = append(calls, "reload "+filepath.Base(path))
			return "reload success", nil
		}}
	ctx := context.Background()
	other := strings.Replace(goodConfig, `serverAddr = "127.0.0.1"`, `serverAddr = "127.0.0.2"`, 1)
	set := agent.ClientSet{Generation: 3, Primary: goodConfig, Edges: []agent.EdgeClient{{Edge: "b", Config: other}, {Edge: "c", Config: goodConfig}}}
	if err := a.Apply(ctx, set); err != nil {
		t.Fatal(err)
	}
	assertFile(t, filepath.Join(dir, "client-b.toml"), other)
	assertFile(t, filepath.Join(dir, "client-c.toml"), goodConfig)
	assertFile(t, filepath.Join(units, "revtunnel-client@.service"), bundle.EdgeClientUnit())
	if st, _ := os.Stat(filepath.Join(dir, "client-b.toml")); st.Mode().Perm() != 0o640 {
		t.Fatalf("client-b.toml mode %v, want client.toml's 0640", st.Mode())
	}
	want := "reload client.toml|daemon-reload|enable revtunnel-client@b.service|restart revtunnel-client@b.service|" +
		"enable revtunnel-client@c.service|restart revtunnel-client@c.service"
	if got := strings.Join(calls, "|"); got != want {
		t.Fatalf("calls\n%s\nwant\n%s", got, want)
	}

	// c leaves; b's proxies change, its server does not: a reload.
	calls = nil
	b2 := strings.Replace(other, "20001", "20002", 1)
	if err := a.Apply(ctx, agent.ClientSet{Generation: 4, Primary: goodConfig, Edges: []agent.EdgeClient{{Edge: "b", Config: b2}}}); err != nil {
		t.Fatal(err)
	}
	want = "reload client.toml|enable revtunnel-client@b.service|is-active --quiet revtunnel-client@b.service|reload client-b.toml|" +
		"disable --now revtunnel-client@c.service"
	if got := strings.Join(calls, "|"); got != want {
		t.Fatalf("calls\n%s\nwant\n%s", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "client-c.toml")); !os.IsNotExist(err) {
		t.Fatalf("client-c.toml is still there: %v", err)
	}

	// b unchanged, but the daemon saw it not connected: a restart, not a
	// reload.
	calls = nil
	if err := a.Apply(ctx, agent.ClientSet{Generation: 4, Primary: goodConfig, Edges: []agent.EdgeClient{{Edge: "b", Config: b2}},
		Reconnect: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	want = "reload client.toml|enable revtunnel-client@b.service|restart revtunnel-client@b.service"
	if got := strings.Join(calls, "|"); got != want {
		t.Fatalf("reconnect: calls\n%s\nwant\n%s", got, want)
	}

	// b's client is active but still starting (the last set restarted it
	// a moment ago): frpc's reload is refused. It is restarted instead,
	// with the new file, not left on the previous one.
	calls = nil
	starting := a
	b3 := strings.Replace(b2, "20002", "20003", 1)
	starting.Reload = func(_ context.Context, path string) (string, error) {
		calls = append(calls, "reload "+filepath.Base(path))
		if filepath.Base(path) == "client.toml" {
			return "reload success", nil
		}
		return `reload error: Get "http://127.0.0.1:7401/api/reload": dial tcp 127.0.0.1:7401: connect: connection refused`, errors.New("exit status 1")
	}
	if err := starting.Apply(ctx, agent.ClientSet{Generation: 5, Primary: goodConfig, Edges: []agent.EdgeClient{{Edge: "b", Config: b3}}}); err != nil {
		t.Fatalf("a client still starting: %v", err)
	}
	assertFile(t, filepath.Join(dir, "client-b.toml"), b3)
	want = "reload client.toml|enable revtunnel-client@b.service|is-active --quiet revtunnel-client@b.service|reload client-b.toml|restart revtunnel-client@b.service"
	if got := strings.Join(calls, "|"); got != want {
		t.Fatalf("still starting: calls\n%s\nwant\n%s", got, want)
	}

	// A refused config for d: b is still applied, the error names d.
	calls = nil
	bad := strings.Replace(goodConfig, "[[proxies]]", "[transport]\nheartbeatInterval = 60\nheartbeatTimeout = 10\n[[proxies]]", 1)
	err := a.Apply(ctx, agent.ClientSet{Generation: 5, Primary: goodConfig, Edges: []agent.EdgeClient{
		{Edge: "d", Config: bad}, {Edge: "b", Config: goodConfig}}})
	if err == nil || !strings.Contains(err.Error(), "edge d's client (revtunnel-client@d.service)") || !strings.Contains(err.Error(), "heartbeat timeout") {
		t.Fatalf("refused edge: %v", err)
	}
	assertFile(t, filepath.Join(dir, "client-b.toml"), goodConfig)
	if _, err := os.Stat(filepath.Join(dir, "client-d.toml")); !os.IsNotExist(err) {
		t.Fatalf("a refused config was installed: %v", err)
	}
	if !strings.Contains(strings.Join(calls, "|"), "restart revtunnel-client@b.service") {
		t.Fatalf("b's server changed, it was not restarted: %v", calls)
	}
}

// TestEdgeClientUnit: the template is the client's unit but for its
// description and its config file.
func TestEdgeClientUnit(t *testing.T) {
	u := bundle.EdgeClientUnit()
	if !strings.Contains(u, "ExecStart=/usr/local/bin/revtunnel-client -c /etc/revtunnel/client-%i.toml\n") ||
		!strings.Contains(u, "Description=tunnelsvc reverse tunnel client for edge %i\n") {
		t.Fatalf("template:\n%s", u)
	}
	if strings.Count(u, "\n") != strings.Count(bundle.ClientUnit(), "\n") {
		t.Fatal("the template differs from the client's unit by more than two lines")
	}
	if !strings.Contains(bundle.AgentSudoers(), "NOPASSWD: /usr/local/bin/tunnel-agent apply-clients\n") {
		t.Fatal("the sudo rules do not let the agent run apply-clients")
	}
}
