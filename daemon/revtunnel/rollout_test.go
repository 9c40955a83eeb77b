package revtunnel_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/delivery"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// machineSys is the machine side of the agent: the real Applier (frpc
// verify, atomic rename, frpc reload through frpc's admin API), and a
// restart that does what systemctl restart revtunnel-client does: stop
// frpc and start it again on the installed config.
type machineSys struct {
	t        *testing.T
	path     string
	mu       sync.Mutex
	proc     *testutil.Proc
	restarts int
}

func (m *machineSys) start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		m.proc.Stop()
	}
	m.proc = start(m.t, "frpc", frpc, "-c", m.path)
}

func (m *machineSys) UnitState(context.Context) (map[string]string, error) {
	return map[string]string{"ActiveState": "active", "SubState": "running"}, nil
}
func (m *machineSys) Restart(context.Context) error {
	m.mu.Lock()
	m.restarts++
	m.mu.Unlock()
	m.start()
	return nil
}
func (m *machineSys) ApplyConfig(ctx context.Context, config []byte) error {
	return agent.Applier{FRPC: frpc, Path: m.path}.Apply(ctx, config)
}
func (m *machineSys) ClientVersion(context.Context) (string, error) { return "", nil }
func (m *machineSys) Monotonic() (time.Duration, error)             { return 0, nil }
func (m *machineSys) Uninstall(context.Context) error               { return errors.New("not here") }

// legacy turns a rendered config into what the daemon rendered before the
// tunnel CA: no pin, no CA.
func legacy(conf string) string {
	conf = regexp.MustCompile(`(?m)^(trustedCaFile|serverName) = .*\n`).ReplaceAllString(conf, "")
	return regexp.MustCompile(`(?s)ca = """.*?"""\n`).ReplaceAllString(conf, "")
}

// rolloutRig is the server side of a rollout with the real frps, and a
// machine whose frpc runs a config from before the tunnel CA: the daemon's
// agent client, the rollout, a registered machine, and that machine's agent
// (as serve builds it) on its loopback.
type rolloutRig struct {
	t       *testing.T
	svc     *machines.Service
	client  *agentclient.Client
	rollout *agentclient.Rollout
	reg     machines.Registration
	sys     *machineSys
	frps    *testutil.Proc

	// delivery is the daemon's reconciler, which the rollout asks for
	// a delivery (and restart) of the machine's config.
	delivery *delivery.Reconciler
}

func newRolloutRig(t *testing.T, serve func(token string, sys agent.System, log *slog.Logger) http.Handler) *rolloutRig {
	ctx := context.Background()
	dir := t.TempDir()
	ca, st := testCAStore(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lo := testutil.TunnelPorts(t)
	ports := store.PortRange{Lo: lo, Hi: lo + 19}
	frpsPort := freePort(t)
	clientPath := filepath.Join(dir, "client.toml")
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sp, _ := ssh.NewPublicKey(pub)
	r := &rolloutRig{t: t}
	r.svc = &machines.Service{
		Store: st, Sealer: ca.Sealer, Keys: keys{string(ssh.MarshalAuthorizedKey(sp))}, Log: log, Limiter: auth.NewLimiter(nil),
		Ports: ports, Reach: installedReach(t, st, "127.0.0.1"), FRPSPort: frpsPort, SSHLocalPort: echoServer(t),
		AgentLocalPort: freePort(t), ClientAdminPort: freePort(t), ClientConfigPath: clientPath,
	}
	r.client = &agentclient.Client{Machines: r.svc, Host: "127.0.0.1", HTTP: &http.Client{Timeout: 20 * time.Second}, Log: log,
		// What the daemon asks systemd for revtunnel-server, asked of the
		// frps this test runs.
		ServerUID: func(context.Context) (uint32, error) { return agentclient.ProcessUID(r.frps.Cmd.Process.Pid) }}
	r.rollout = &agentclient.Rollout{Delay: 200 * time.Millisecond,
		CurrentCA: func(ctx context.Context) (string, error) {
			ca, err := r.svc.TunnelCA(ctx)
			if err != nil {
				return "", err
			}
			return string(ca.CertPEM), nil
		},
	}
	r.delivery = delivery.New(delivery.Options{Store: st, Configs: r.svc, Agents: r.client, Log: log, NeedsRestart: r.rollout.NeedsRestart})
	r.rollout.Push = r.delivery.Redeliver
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.delivery.Run(rctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })

	plugin := httptest.NewServer(&revtunnel.Plugin{Store: st, Log: log, OnLogin: r.rollout.Login})
	t.Cleanup(plugin.Close)
	d := &revtunnel.Deployer{
		Path: filepath.Join(dir, "root", revtunnel.ServerConfigPath), FRPS: frps,
		CA:       ca,
		CertPath: filepath.Join(dir, "root", revtunnel.ServerCertPath), KeyPath: filepath.Join(dir, "root", revtunnel.ServerKeyPath),
	}
	d.Params = func(context.Context) (frpconf.ServerParams, error) {
		return frpconf.ServerParams{BindPort: frpsPort, PluginAddr: strings.TrimPrefix(plugin.URL, "http://"),
			Ports: ports, CertFile: d.CertPath, KeyFile: d.KeyPath}, nil
	}
	if _, err := d.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	r.frps = start(t, "frps", frps, "-c", d.Path)
	testutil.WaitListening(t, frpsPort, 10*time.Second)

	tok, _ := r.svc.CreateToken(ctx, 0)
	var err error
	r.reg, err = r.svc.Bootstrap(ctx, machines.BootstrapRequest{Token: tok.Token, Name: "old", Username: "pi", FallbackHost: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	// The machine: its agent on its loopback, frpc on a pre-CA config
	// (started by startMachine).
	r.sys = &machineSys{t: t, path: clientPath}
	al, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", r.svc.AgentLocalPort))
	if err != nil {
		t.Fatal(err)
	}
	agentSrv := &http.Server{Handler: serve(r.reg.AgentToken, r.sys, log)}
	go agentSrv.Serve(al)
	t.Cleanup(func() { agentSrv.Close() })
	old := legacy(r.reg.ClientConfig)
	if strings.Contains(old, "trustedCaFile =") || strings.Contains(old, "BEGIN CERTIFICATE") {
		t.Fatalf("legacy config still pins:\n%s", old)
	}
	os.WriteFile(clientPath, []byte(old), 0o600)
	return r
}

// waitPinned waits until the machine's frpc runs pinned to the tunnel CA
// and carries its SSH tunnel, and checks it took one restart and one
// push, which worked.
func (r *rolloutRig) waitPinned() {
	t := r.t
	ctx := context.Background()
	took := eventually(t, 30*time.Second, "frpc restarted onto the pinned config", func() error {
		installed, _ := os.ReadFile(r.sys.path)
		if !strings.Contains(string(installed), "trustedCaFile = '"+r.sys.path+"'") {
			return fmt.Errorf("installed config not pinned yet")
		}
		if r.rollout.NeedsRestart(ctx, r.reg.MachineID) {
			return fmt.Errorf("frpc has not logged in with the CA yet")
		}
		return echo(r.reg.TunnelPort)
	})
	t.Logf("pinned %v after the legacy frpc started", took.Round(time.Millisecond))
	r.sys.mu.Lock()
	restarts := r.sys.restarts
	r.sys.mu.Unlock()
	if restarts != 1 {
		t.Fatalf("frpc restarted %d times, want 1", restarts)
	}
	m, err := r.svc.Store.GetMachine(ctx, r.reg.MachineID)
	if err != nil || m.ConfigPush == nil || !m.ConfigPush.OK || !m.Config.InStep() {
		t.Fatalf("delivery not recorded as applied: %+v %+v %v", m.ConfigPush, m.Config, err)
	}
}

func currentAgent(token string, sys agent.System, log *slog.Logger) http.Handler {
	return &agent.Server{Token: token, Unit: "revtunnel-client.service", Sys: sys, Log: log}
}

// TestRolloutPinsExistingMachine: a machine whose frpc runs a config from
// before the tunnel CA logs in to the real frps; the daemon pushes its
// config through its agent (reached through the machine's agent tunnel)
// and restarts its frpc, which comes back pinned to the CA and still
// carries its tunnel.
func TestRolloutPinsExistingMachine(t *testing.T) {
	r := newRolloutRig(t, currentAgent)
	r.sys.start()
	r.waitPinned()
	m, err := r.svc.Machine(context.Background(), r.reg.MachineID, "")
	if err != nil {
		t.Fatal(err)
	}
	if m.AgentOutdated || m.StatusReason != "" {
		t.Fatalf("a current agent shows outdated %v, status reason %q", m.AgentOutdated, m.StatusReason)
	}
}
