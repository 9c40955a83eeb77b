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

// TestRolloutPinsExistingMachine: a machine whose frpc runs a config from
// before the tunnel CA logs in to the real frps; the daemon pushes its
// config through its agent (reached through the machine's agent tunnel)
// and restarts its frpc, which comes back pinned to the CA and still
// carries its tunnel.
func TestRolloutPinsExistingMachine(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ca, st := testCAStore(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lo := testutil.TunnelPortBase()
	ports := store.PortRange{Lo: lo, Hi: lo + 19}
	frpsPort := freePort(t)
	clientPath := filepath.Join(dir, "client.toml")
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sp, _ := ssh.NewPublicKey(pub)
	svc := &machines.Service{
		Store: st, Sealer: ca.Sealer, Keys: keys{string(ssh.MarshalAuthorizedKey(sp))}, Log: log,
		Ports: ports, ServerHost: "127.0.0.1", FRPSPort: frpsPort, SSHLocalPort: echoServer(t),
		AgentLocalPort: freePort(t), ClientAdminPort: freePort(t), ClientConfigPath: clientPath,
	}

	var pushes sync.WaitGroup
	var pushErrs []error
	var mu sync.Mutex
	client := &agentclient.Client{Machines: svc, Host: "127.0.0.1", HTTP: &http.Client{Timeout: 20 * time.Second}, Log: log}
	rollout := &agentclient.Rollout{Delay: 200 * time.Millisecond,
		CurrentCA: func(ctx context.Context) (string, error) {
			ca, err := svc.TunnelCA(ctx)
			if err != nil {
				return "", err
			}
			return string(ca.CertPEM), nil
		},
		Push: func(id int64) {
			pushes.Add(1)
			defer pushes.Done()
			err := client.PushConfig(ctx, id)
			mu.Lock()
			pushErrs = append(pushErrs, err)
			mu.Unlock()
		},
	}
	client.Rollout = rollout
	t.Cleanup(pushes.Wait)

	plugin := httptest.NewServer(&revtunnel.Plugin{Store: st, Log: log, OnLogin: rollout.Login})
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
	start(t, "frps", frps, "-c", d.Path)
	testutil.WaitListening(t, frpsPort, 10*time.Second)

	tok, _ := svc.CreateToken(ctx, 0)
	reg, err := svc.Bootstrap(ctx, machines.BootstrapRequest{Token: tok.Token, Name: "old", Username: "pi", FallbackHost: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	// The machine: its agent on its loopback, frpc on a pre-CA config.
	sys := &machineSys{t: t, path: clientPath}
	al, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", svc.AgentLocalPort))
	if err != nil {
		t.Fatal(err)
	}
	agentSrv := &http.Server{Handler: &agent.Server{Token: reg.AgentToken, Unit: "revtunnel-client.service", Sys: sys, Log: log}}
	go agentSrv.Serve(al)
	t.Cleanup(func() { agentSrv.Close() })
	old := legacy(reg.ClientConfig)
	if strings.Contains(old, "trustedCaFile =") || strings.Contains(old, "BEGIN CERTIFICATE") {
		t.Fatalf("legacy config still pins:\n%s", old)
	}
	os.WriteFile(clientPath, []byte(old), 0o600)
	sys.start()

	took := eventually(t, 30*time.Second, "frpc restarted onto the pinned config", func() error {
		installed, _ := os.ReadFile(clientPath)
		if !strings.Contains(string(installed), "trustedCaFile = '"+clientPath+"'") {
			return fmt.Errorf("installed config not pinned yet")
		}
		if rollout.NeedsRestart(ctx, reg.MachineID) {
			return fmt.Errorf("frpc has not logged in with the CA yet")
		}
		return echo(reg.TunnelPort)
	})
	t.Logf("pinned %v after the legacy frpc started", took.Round(time.Millisecond))
	sys.mu.Lock()
	restarts := sys.restarts
	sys.mu.Unlock()
	if restarts != 1 {
		t.Fatalf("frpc restarted %d times, want 1", restarts)
	}
	pushes.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(pushErrs) != 1 || pushErrs[0] != nil {
		t.Fatalf("pushes: %v", pushErrs)
	}
}
