package revtunnel_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/daemontest"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// keys is the daemon's default public key, for the tests that build the
// machines service on its own.
type keys struct{ key string }

func (k keys) DefaultPublicKey(context.Context) (string, error) { return k.key, nil }

// installedReach is the address resolver of a server installed with its
// server host given (as `tunnelsvc install --server-host` records it),
// for the tests that build the machines service on its own.
func installedReach(t testing.TB, st *store.Store, host string) *reach.Resolver {
	t.Helper()
	settings := localsetup.Settings{Store: st}
	if err := settings.SaveVPS(context.Background(), localsetup.VPS{ServerHost: host, SkipWebproxy: true}); err != nil {
		t.Fatal(err)
	}
	return &reach.Resolver{Settings: settings.Reach}
}

// The shared end-to-end helpers, under their local names.
var (
	freePort   = func(t *testing.T) int { return testutil.FreePort(t) }
	echoServer = func(t *testing.T) int { return testutil.EchoServer(t) }
	echo       = testutil.Echo
	eventually = func(t *testing.T, d time.Duration, what string, cond func() error) time.Duration {
		t.Helper()
		return testutil.Eventually(t, d, what, cond)
	}
	start = func(t *testing.T, name, bin string, args ...string) *testutil.Proc {
		t.Helper()
		return testutil.Start(t, name, bin, args...)
	}
)

type event struct {
	Source, Kind, Message string
	MachineID             int64 `json:"machine_id"`
}

// engine is the whole daemon (daemontest: as `tunnelsvc serve` runs it)
// with a real frps on the config it wrote, on 127.0.0.1, ready for
// machines to register through its API and run real frpc.
type engine struct {
	t        *testing.T
	ctx      context.Context
	d        *daemontest.Daemon
	st       *store.Store
	c, anon  *daemontest.Client
	ports    store.PortRange
	server   *testutil.Proc
	echoPort int // the machines' "sshd": an echo server
	frpsPort int
	dir      string
}

func startEngine(t *testing.T) *engine {
	d := daemontest.Start(t, daemontest.Options{})
	cfg := d.Config
	e := &engine{t: t, ctx: context.Background(), d: d, st: d.App.Store, c: d.Setup(t), anon: d.Anon(t),
		ports:    store.PortRange{Lo: cfg.TunnelPortLo, Hi: cfg.TunnelPortHi},
		echoPort: testutil.EchoServer(t), frpsPort: cfg.FRPSPort, dir: d.Dir}
	e.server = d.RunFRPS(t)
	return e
}

// register joins a machine, as bootstrap.sh does.
func (e *engine) register(name string) daemontest.Machine { return e.d.Join(e.t, e.c, name) }

// runClient runs frpc on a machine's config; the machine's sshd is the
// echo server.
func (e *engine) runClient(name, conf string) *testutil.Proc {
	return e.d.RunFRPC(e.t, name, conf, e.echoPort)
}

func (e *engine) machineByName(name string) map[string]any {
	var ms []map[string]any
	e.c.Call("GET", "/api/machines", nil, &ms)
	for _, m := range ms {
		if m["name"] == name {
			return m
		}
	}
	return nil
}

// hasEvent: an activity event of kind whose message contains contains.
func (e *engine) hasEvent(kind, contains string) error {
	var es []event
	e.c.Call("GET", "/api/local/activity", nil, &es)
	for _, ev := range es {
		if ev.Kind == kind && strings.Contains(ev.Message, contains) {
			return nil
		}
	}
	return fmt.Errorf("no %s event mentioning %q", kind, contains)
}

// TestRealEngine runs the daemon's API, its frps plugin, a real frps and
// real frpc processes on 127.0.0.1, with configs the daemon rendered.
func TestRealEngine(t *testing.T) {
	e := startEngine(t)
	ctx, st, c, ports, server, echoPort := e.ctx, e.st, e.c, e.ports, e.server, e.echoPort
	register, runClient, machineByName, hasEvent := e.register, e.runClient, e.machineByName, e.hasEvent
	frpsPID := server.Cmd.Process.Pid
	var rmsg struct{ Message string }

	// 1. A machine registered through POST /api/bootstrap carries bytes
	// through its SSH tunnel port.
	a := register("alpha")
	if m := machineByName("alpha"); m["status"] != "pending" {
		t.Fatalf("new machine status %v, want pending", m["status"])
	}
	clientA := runClient("alpha", a.ClientConfig)
	took := eventually(t, 15*time.Second, "bytes through alpha's ssh tunnel port", func() error { return echo(a.TunnelPort) })
	t.Logf("alpha's ssh tunnel carried bytes %v after frpc started", took.Round(time.Millisecond))
	if m := machineByName("alpha"); m["status"] != "online" || m["last_seen"] == nil {
		t.Fatalf("alpha after connecting: %v", m)
	}
	if err := hasEvent(revtunnel.EventConnected, `"alpha"`); err != nil {
		t.Fatal(err)
	}
	alphaID := int64(machineByName("alpha")["id"].(float64))

	// 2. A tcp tunnel added afterwards carries traffic; frps keeps its PID.
	var tun struct {
		ID         int64 `json:"id"`
		RemotePort int   `json:"remote_port"`
	}
	if code, _ := c.Call("POST", "/api/tunnels", map[string]any{"machine_id": alphaID, "name": "db", "kind": "tcp", "local_port": echoPort}, &tun); code != 201 {
		t.Fatalf("create tunnel: %d", code)
	}
	if echo(tun.RemotePort) == nil {
		t.Fatal("the tunnel carried traffic before its machine asked for it")
	}
	var newConf string
	if code, _ := c.Call("GET", fmt.Sprintf("/api/machines/%d/revtunnel-client", alphaID), nil, &newConf); code != 200 {
		t.Fatalf("client config: %d %s", code, newConf)
	}
	clientA.Stop() // what the agent does: new client.toml, restart revtunnel-client
	clientA = runClient("alpha", newConf)
	eventually(t, 15*time.Second, "bytes through the new tcp tunnel", func() error { return echo(tun.RemotePort) })
	if !server.Running() || server.Cmd.Process.Pid != frpsPID {
		t.Fatal("frps was restarted to add a tunnel")
	}
	if code, _ := c.Call("POST", "/api/local/reconcile", nil, &rmsg); code != 200 || rmsg.Message != "revtunnel-server configuration unchanged" {
		t.Fatalf("reconcile after adding a tunnel: %d %q", code, rmsg.Message)
	}
	if err := hasEvent(revtunnel.EventTunnelUp, fmt.Sprintf("port %d", tun.RemotePort)); err != nil {
		t.Fatal(err)
	}

	// 3. A client presenting another machine's secret is refused and recorded.
	b := register("beta")
	secretA := regexp.MustCompile(`(?m)^token = '([^']+)'`).FindStringSubmatch(a.ClientConfig)[1]
	secretB := regexp.MustCompile(`(?m)^token = '([^']+)'`).FindStringSubmatch(b.ClientConfig)[1]
	impostor := runClient("beta-impostor", strings.Replace(b.ClientConfig, secretB, secretA, 1))
	select {
	case <-impostor.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("frpc with another machine's secret was not refused")
	}
	if !strings.Contains(impostor.Out.String(), "credential of machine") {
		t.Fatalf("frpc did not report the refusal:\n%s", impostor.Out.String())
	}
	eventually(t, 2*time.Second, "login refusal recorded", func() error { return hasEvent(revtunnel.EventLoginRefused, "credential of machine") })
	// ...and listed as a stale tunnel credential, grouped with a count.
	eventually(t, 2*time.Second, "stale tunnel credential listed", func() error {
		var stale []struct {
			Kind, ClientAddr, Reason string
			Count                    int
		}
		c.Call("GET", "/api/security/stale-tokens", nil, &stale)
		for _, a := range stale {
			if a.Kind == "tunnel_credential" && a.Count >= 1 && strings.Contains(a.Reason, "credential of machine") {
				return nil
			}
		}
		return fmt.Errorf("no tunnel_credential entry in %+v", stale)
	})
	if echo(b.TunnelPort) == nil {
		t.Fatal("beta's port works for an impostor")
	}

	// 4. A client claiming a port it does not own is refused and recorded.
	// A port of the range that nobody holds: frps itself would allow it.
	stolen := 0
	for p := ports.Lo; p <= ports.Hi && stolen == 0; p++ {
		var n int
		if err := st.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM ports WHERE port = ?", p).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			stolen = p
		}
	}
	greedy := strings.Replace(b.ClientConfig, fmt.Sprintf("remotePort = %d", b.TunnelPort), fmt.Sprintf("remotePort = %d", stolen), 1)
	runClient("beta-greedy", greedy)
	eventually(t, 15*time.Second, "port claim refusal recorded", func() error {
		return hasEvent(revtunnel.EventProxyRefused, fmt.Sprintf("may not bind port %d", stolen))
	})
	if echo(stolen) == nil {
		t.Fatalf("port %d, which beta does not own, carries traffic", stolen)
	}

	// 5. Deleting the machine stops its tunnels within 2 s.
	if code, _ := c.Call("DELETE", fmt.Sprintf("/api/machines/%d", alphaID), nil, nil); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	took = eventually(t, 2*time.Second, "alpha's tunnels stop after delete", func() error {
		if echo(a.TunnelPort) == nil || echo(tun.RemotePort) == nil {
			return fmt.Errorf("still carrying traffic")
		}
		return nil
	})
	t.Logf("alpha's tunnels stopped %v after the delete answered", took.Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	if echo(a.TunnelPort) == nil || echo(tun.RemotePort) == nil {
		t.Fatal("a deleted machine's tunnel carried traffic again")
	}
	if !server.Running() || server.Cmd.Process.Pid != frpsPID {
		t.Fatal("frps restarted during the test")
	}
}
