package speedtest_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/speedtest"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
)

// helperEnv makes the test binary the machine's agent, in the namespace
// it is started in (a socket belongs to the namespace of the process that
// opens it).
const helperEnv = "TUNNELSVC_SPEEDTEST_HELPER"

var frps, frpc string

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "agent" {
		serveAgent()
		return
	}
	frps, frpc = testutil.FRP()
	os.Exit(m.Run())
}

// serveAgent is tunnel-agent on 127.0.0.1:$PORT with $TOKEN, until stdin
// closes.
func serveAgent() {
	l, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: &agent.Server{Token: os.Getenv("TOKEN"), Unit: "revtunnel-client.service", Sys: testutil.IdleMachine{}}}
	go srv.Serve(l)
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
}

// linkShape is a link's limits: netem's rate, delay (each way) and limit
// (packets queued), and the MTU of both ends.
type linkShape struct {
	rateMbit int
	delay    time.Duration
	limit    int
	mtu      int
}

// shapedLink joins a namespace to this one: Host is this side's address,
// Peer the other's; How says what carries it.
type shapedLink struct{ Host, Peer, How string }

// newShapedLink joins ns to this namespace by a veth pair with netem on
// both ends, or, where the kernel has no netem, by an emulated link
// (tunlink_test.go). Both ends go when the test ends.
func newShapedLink(t *testing.T, ns string, shape linkShape) shapedLink {
	t.Helper()
	n := testutil.NetnsSeq()
	sub := 100 + (int(n)+os.Getpid())%150
	here, there := fmt.Sprintf("tsp%dh%d", os.Getpid()%10000, n), fmt.Sprintf("tsp%dp%d", os.Getpid()%10000, n)
	l := shapedLink{Host: fmt.Sprintf("10.231.%d.1", sub), Peer: fmt.Sprintf("10.231.%d.2", sub), How: "veth pair with netem"}
	testutil.Run(t, "ip", "link", "add", here, "type", "veth", "peer", "name", there)
	t.Cleanup(func() { exec.Command("ip", "link", "del", here).Run() })
	netem := []string{"root", "netem", "rate", fmt.Sprintf("%dmbit", shape.rateMbit),
		"delay", fmt.Sprintf("%dms", shape.delay.Milliseconds()), "limit", strconv.Itoa(shape.limit)}
	out, err := exec.Command("tc", append([]string{"qdisc", "add", "dev", here}, netem...)...).CombinedOutput()
	if err != nil {
		if !strings.Contains(string(out), "qdisc kind is unknown") {
			t.Fatalf("tc qdisc add dev %s %s: %v\n%s", here, strings.Join(netem, " "), err, out)
		}
		exec.Command("ip", "link", "del", here).Run()
		return newTUNLink(t, ns, sub, shape)
	}
	testutil.Run(t, "ip", "link", "set", there, "netns", ns)
	testutil.Run(t, append([]string{"tc", "-n", ns, "qdisc", "add", "dev", there}, netem...)...)
	testutil.Run(t, "ip", "addr", "add", l.Host+"/30", "dev", here)
	testutil.Run(t, "ip", "-n", ns, "addr", "add", l.Peer+"/30", "dev", there)
	testutil.Run(t, "ip", "link", "set", here, "mtu", strconv.Itoa(shape.mtu), "up")
	testutil.Run(t, "ip", "-n", ns, "link", "set", there, "mtu", strconv.Itoa(shape.mtu), "up")
	return l
}

// startAgent runs the agent in ns on 127.0.0.1:port, until the test ends.
func startAgent(t *testing.T, ns string, port int, token string) {
	t.Helper()
	testutil.HelperInNetns(t, "agent", ns, helperEnv+"=agent", "PORT="+strconv.Itoa(port), "TOKEN="+token)
}

// oneMachine is the machines domain for the agent client: machine 1's
// agent answers on port, with token.
type oneMachine struct {
	port  int
	token string
}

func (o oneMachine) Agent(context.Context, int64) (machines.AgentAccess, error) {
	return machines.AgentAccess{Port: o.port, Token: o.token}, nil
}
func (oneMachine) ClientConfig(context.Context, int64, string) (string, error) { return "", nil }
func (oneMachine) SetAgentOutdated(context.Context, int64, bool) error         { return nil }

var bindAddrLine = regexp.MustCompile(`(?m)^bindAddr = .*$`)

// tunnel runs real frps here, listening on the link's address, and real
// frpc in ns dialing it, with the daemon's configs: machine 1, whose agent
// listens on agentLocal in ns, reached at agentPort on this loopback.
func tunnel(t *testing.T, ns string, link shapedLink, agentLocal, agentPort int, ports store.PortRange) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sealer, err := seal.LoadOrCreate(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := (&tunnelca.Authority{Store: st, Sealer: sealer}).Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(tunnelca.Names(""), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	os.WriteFile(certFile, certPEM, 0o600)
	os.WriteFile(keyFile, keyPEM, 0o600)
	// frps asks the daemon's plugin about every login and proxy: yes.
	plugin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte(`{"reject":false,"unchange":true}`))
	}))
	t.Cleanup(plugin.Close)
	frpsPort := testutil.FreePort(t)
	server, err := frpconf.ServerConfig(frpconf.ServerParams{BindPort: frpsPort, PluginAddr: plugin.Listener.Addr().String(),
		Ports: ports, CertFile: certFile, KeyFile: keyFile}, "")
	if err != nil {
		t.Fatal(err)
	}
	// Only on the link: nothing of the test listens on the host's other
	// addresses.
	server = bindAddrLine.ReplaceAllString(server, fmt.Sprintf("bindAddr = '%s'", link.Host))
	serverPath, clientPath := filepath.Join(dir, "server.toml"), filepath.Join(dir, "client.toml")
	os.WriteFile(serverPath, []byte(server), 0o600)
	client, err := frpconf.ClientConfig(frpconf.ClientParams{
		ServerAddr: link.Host, ServerPort: frpsPort, MachineID: 1, Secret: "secret-of-machine-1",
		SSHLocalPort: 22, TunnelPort: ports.Lo, AgentLocalPort: agentLocal, AgentPort: agentPort, AdminPort: 7400,
		CA: string(ca.CertPEM), ServerName: tunnelca.ServerName, ConfigPath: clientPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(clientPath, []byte(client), 0o600)
	testutil.Start(t, "frps", frps, "-c", serverPath)
	testutil.Start(t, "frpc", "ip", "netns", "exec", ns, frpc, "-c", clientPath)
}

// TestSpeedThroughShapedLink is the speed test against a machine behind
// a link of 50 Mbit/s each way, 20 ms each way (a 40 ms round trip) and an
// MTU of 1400: the machine (its frpc and its agent) in a network namespace
// of its own, the edge's frps, agent client and speed tests here. Every
// measurement must come within 15 % of the link's, and the largest payload
// that passes unfragmented is 1400 - 28.
func TestSpeedThroughShapedLink(t *testing.T) {
	testutil.NeedNetnsTools(t, map[string]string{"ip": "iproute2", "tc": "iproute2"})
	shape := linkShape{rateMbit: 50, delay: 20 * time.Millisecond, mtu: 1400}
	// netem's queue holds four times the bandwidth-delay product (50 Mbit/s
	// over 40 ms: 250 kB, some 180 packets), so that TCP fills the link.
	bdp := shape.rateMbit * 1_000_000 / 8 * int(2*shape.delay/time.Millisecond) / 1000
	shape.limit = max(1000, 4*bdp/shape.mtu)
	ns := testutil.NewNetns(t, "tsvcspeed")
	link := newShapedLink(t, ns, shape)
	t.Logf("the link: %s, %d Mbit/s and %s each way, MTU %d, queue of %d packets", link.How, shape.rateMbit, shape.delay, shape.mtu, shape.limit)

	ports := store.PortRange{Lo: testutil.TunnelPorts(t)}
	ports.Hi = ports.Lo + testutil.TunnelBlock - 1
	const agentLocal, token = 7390, "agent-token-of-machine-1"
	agentPort := ports.Lo + 1
	startAgent(t, ns, agentLocal, token)
	tunnel(t, ns, link, agentLocal, agentPort, ports)

	ctx := context.Background()
	agents := &agentclient.Client{Machines: oneMachine{port: agentPort, token: token}, Host: "127.0.0.1", HTTP: &http.Client{Timeout: 20 * time.Second}}
	testutil.Eventually(t, 30*time.Second, "the agent answers through its tunnel", func() error {
		_, err := agents.AgentStatus(ctx, 1)
		return err
	})
	s, m := newService(t, agents)
	s.Host = func(context.Context, int64) (string, error) { return link.Host, nil }
	if _, err := s.Start(ctx, m.ID, 3); err != nil {
		t.Fatal(err)
	}
	got := waitEnd(t, s, m.ID, 60*time.Second)
	if got.State != "done" {
		t.Fatalf("the test failed: %s", got.Error)
	}
	t.Logf("measured: download %.1f Mbit/s, upload %.1f Mbit/s, RTT %.1f ms, MTU %d, payload %d",
		*got.DownloadMbps, *got.UploadMbps, *got.RTTMillis, *got.MTU, *got.Payload)
	within := func(what string, v, want float64) {
		if v < want*0.85 || v > want*1.15 {
			t.Errorf("%s: %.1f, not within 15 %% of %.1f", what, v, want)
		}
	}
	within("download (Mbit/s)", *got.DownloadMbps, float64(shape.rateMbit))
	within("upload (Mbit/s)", *got.UploadMbps, float64(shape.rateMbit))
	within("round trip (ms)", *got.RTTMillis, float64(2*shape.delay/time.Millisecond))
	if *got.MTU != shape.mtu || *got.Payload != shape.mtu-28 {
		t.Errorf("path MTU %d, payload %d; want %d and %d", *got.MTU, *got.Payload, shape.mtu, shape.mtu-28)
	}
}

// waitEnd waits up to d for machine id's newest test to end.
func waitEnd(t *testing.T, s *speedtest.Service, id int64, d time.Duration) speedtest.Test {
	t.Helper()
	var last speedtest.Test
	testutil.Eventually(t, d, "the test ends", func() error {
		ts, err := s.History(context.Background(), id)
		if err != nil || len(ts) == 0 {
			return fmt.Errorf("%v %v", ts, err)
		}
		if last = ts[0]; last.State == store.SpeedTestRunning {
			return fmt.Errorf("still %s at %d %%", last.Phase, last.Progress)
		}
		return nil
	})
	return last
}
