package publish_test

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/firewall"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/publish"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// The test binary doubles as the echo server, the allow-all frps plugin
// and the prober it runs inside the namespaces (a socket belongs to the
// namespace of the process that opens it).
const helperEnv = "TUNNELSVC_PUBLISH_HELPER"

var frps, frpc string

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "echo":
		// The same port echoes datagrams too (the udp tunnels' service).
		if err := udpEcho("127.0.0.1:" + os.Getenv("PORT")); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		serveHelper(func(l net.Listener) {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() { defer c.Close(); io.Copy(c, c) }()
			}
		})
		return
	case "plugin":
		serveHelper(func(l net.Listener) {
			http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte(`{"reject":false,"unchange":true}`))
			}))
		})
		return
	case "probe":
		probeHelper(strings.Split(os.Getenv("TARGETS"), ","))
		return
	case "ppudp":
		if err := udpProxyProtocolServer("127.0.0.1:" + os.Getenv("PORT")); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		bufio.NewReader(os.Stdin).ReadString('\n')
		return
	case "udpask":
		fmt.Print(udpAsk(os.Getenv("TARGET"), "who am I?"))
		return
	}
	flag.Parse()
	frps, frpc = testutil.FRP()
	os.Exit(m.Run())
}

// serveHelper listens on 127.0.0.1:$PORT until stdin closes.
func serveHelper(serve func(net.Listener)) {
	l, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	go serve(l)
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
}

// udpEcho sends every datagram arriving on addr back to its sender.
func udpEcho(addr string) error {
	return udpServe(addr, func(p []byte) []byte { return p })
}

// udpProxyProtocolServer answers each datagram on addr with the source its
// PROXY protocol v2 header names ("pp=<ip> v2"), or "pp=none" without one:
// frpc puts the header before the first datagram of each flow.
func udpProxyProtocolServer(addr string) error {
	return udpServe(addr, func(p []byte) []byte {
		if h, err := proxyproto.Read(bufio.NewReader(bytes.NewReader(p))); err == nil {
			return []byte(fmt.Sprintf("pp=%s v%d", h.SourceAddr.(*net.UDPAddr).IP, h.Version))
		}
		return []byte("pp=none")
	})
}

// udpServe answers each datagram arriving on addr with answer's reply.
func udpServe(addr string, answer func([]byte) []byte) error {
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo(answer(buf[:n]), from)
		}
	}()
	return nil
}

// udpAsk sends a datagram to target and returns the answer, trying three
// times (a datagram may be lost; three in a row on a veth are not); "" when
// none came.
func udpAsk(target, payload string) string {
	c, err := net.Dial("udp", target)
	if err != nil {
		return ""
	}
	defer c.Close()
	buf := make([]byte, 256)
	for try := 0; try < 3; try++ {
		if _, err := c.Write([]byte(payload)); err != nil {
			return ""
		}
		c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if n, err := c.Read(buf); err == nil {
			return string(buf[:n])
		}
	}
	return ""
}

// udpOpen says whether a datagram sent to addr comes back.
func udpOpen(addr string) bool { return udpAsk(addr, "ping\n") == "ping\n" }

// probeHelper prints, per target, "open" when a line sent there comes back
// (through frps, frpc and the echo server), else "closed". A target
// "udp:host:port" is probed with datagrams.
func probeHelper(targets []string) {
	var wg sync.WaitGroup
	res := make([]string, len(targets))
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = t + " closed"
			if addr, ok := strings.CutPrefix(t, "udp:"); ok {
				if udpOpen(addr) {
					res[i] = t + " open"
				}
				return
			}
			c, err := net.DialTimeout("tcp", t, 800*time.Millisecond)
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Write([]byte("ping\n")); err != nil {
				return
			}
			if line, err := bufio.NewReader(c).ReadString('\n'); err == nil && line == "ping\n" {
				res[i] = t + " open"
			}
		}()
	}
	wg.Wait()
	fmt.Println(strings.Join(res, "\n"))
}

func TestRenderGolden(t *testing.T) {
	for _, c := range []struct {
		name string
		p    publish.Params
	}{
		{"any-address", publish.Params{Ports: []int{20004, 20003, 20004}}},
		{"bind-ip", publish.Params{BindIP: "203.0.113.10", Ports: []int{20003}}},
		{"udp", publish.Params{Ports: []int{20003}, UDPPorts: []int{20006, 20005}}},
		{"udp-only-bind-ip", publish.Params{BindIP: "203.0.113.10", UDPPorts: []int{20005}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := publish.Render(c.p)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", c.name+".nft.golden")
			if *update {
				os.WriteFile(path, []byte(got), 0o644)
			}
			want, err := os.ReadFile(path)
			if err != nil || string(want) != got {
				t.Fatalf("differs from %s (go test -update rewrites it): %v\n%s", path, err, got)
			}
			// Only this check needs nft: its own subtest is what a missing
			// tool skips, not the golden comparison above.
			t.Run("nft -c", func(t *testing.T) {
				needTools(t)
				ns := newNetns(t)
				f := filepath.Join(t.TempDir(), "p.nft")
				os.WriteFile(f, []byte(got), 0o600)
				if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "-c", "-f", f).CombinedOutput(); err != nil {
					t.Fatalf("nft -c refuses it: %v\n%s", err, out)
				}
			})
		})
	}
	for in, want := range map[string]string{"2001:db8::1": "IPv4 only", "nonsense": "not an IP address"} {
		if _, err := publish.Render(publish.Params{BindIP: in, Ports: []int{20003}}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bind %q: %v, want %q", in, err, want)
		}
	}
	if _, err := publish.Render(publish.Params{Ports: []int{70000}}); err == nil || !strings.Contains(err.Error(), "not a port") {
		t.Errorf("port 70000: %v", err)
	}
}

func needTools(t testing.TB) {
	t.Helper()
	testutil.NeedNetnsTools(t, map[string]string{"nft": "nftables", "ip": "iproute2", "sysctl": "procps"})
}

func run(t testing.TB, args ...string) string {
	t.Helper()
	return testutil.Run(t, args...)
}

func newNetns(t testing.TB) string {
	t.Helper()
	return testutil.NewNetns(t, "tsvcpub")
}

// helper starts this binary in ns as a helper on 127.0.0.1:port.
func helper(t *testing.T, ns, mode string, port int) {
	t.Helper()
	testutil.HelperInNetns(t, mode, ns, helperEnv+"="+mode, "PORT="+strconv.Itoa(port))
}

func probe(t *testing.T, ns string, targets ...string) map[string]string {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=probe", "TARGETS="+strings.Join(targets, ","))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			got[k] = v
		}
	}
	return got
}

// expect probes from ns and compares each target's state.
func expect(t *testing.T, ns, when string, want map[string]string) {
	t.Helper()
	var targets []string
	for k := range want {
		targets = append(targets, k)
	}
	got := probe(t, ns, targets...)
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %s is %s, want %s", when, k, got[k], w)
		}
	}
}

// The rig's fixed ports, inside its own namespaces.
const echoPort, pluginPort, frpsPort = 9000, 7381, 7000
const sshPort, agentPort = 20001, 20002

// vpsRig is a "vps" network namespace running real frps and frpc, with
// the daemon's configs for machine 1 and the tunnels given, and an
// allow-all plugin; a "client" namespace (10.199.77.2, on its link vc)
// reaches the vps at 10.199.77.1 and 10.199.77.3 by veth.
type vpsRig struct {
	vps, cli, vc, dir string
	st                *store.Store
}

// startVPS starts the rig; services starts the tunnels' services in the
// vps namespace and returns the tunnels. It returns once frps listens.
func startVPS(t *testing.T, services func(vps string) []store.Tunnel) *vpsRig {
	t.Helper()
	ctx := context.Background()
	r := &vpsRig{dir: t.TempDir(), vps: newNetns(t), cli: newNetns(t)}
	dir, vps, cli := r.dir, r.vps, r.cli
	n := testutil.NetnsSeq()
	vs, vc := fmt.Sprintf("tpb%ds%d", os.Getpid()%10000, n), fmt.Sprintf("tpb%dc%d", os.Getpid()%10000, n)
	r.vc = vc
	run(t, "ip", "link", "add", vs, "type", "veth", "peer", "name", vc)
	run(t, "ip", "link", "set", vs, "netns", vps)
	run(t, "ip", "link", "set", vc, "netns", cli)
	run(t, "ip", "-n", vps, "addr", "add", "10.199.77.1/24", "dev", vs)
	run(t, "ip", "-n", vps, "addr", "add", "10.199.77.3/24", "dev", vs)
	run(t, "ip", "-n", cli, "addr", "add", "10.199.77.2/24", "dev", vc)
	run(t, "ip", "-n", vps, "link", "set", vs, "up")
	run(t, "ip", "-n", cli, "link", "set", vc, "up")

	st, err := store.Open(ctx, filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	r.st = st
	t.Cleanup(func() { st.Close() })
	sealer, err := seal.LoadOrCreate(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := (&tunnelca.Authority{Store: st, Sealer: sealer}).Load(ctx)
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

	tunnels := services(vps)
	helper(t, vps, "plugin", pluginPort)
	server, err := frpconf.ServerConfig(frpconf.ServerParams{BindPort: frpsPort, PluginAddr: fmt.Sprintf("127.0.0.1:%d", pluginPort),
		Ports: store.PortRange{Lo: 20000, Hi: 20010}, CertFile: certFile, KeyFile: keyFile}, "")
	if err != nil {
		t.Fatal(err)
	}
	serverPath, clientPath := filepath.Join(dir, "server.toml"), filepath.Join(dir, "client.toml")
	os.WriteFile(serverPath, []byte(server), 0o600)
	client, err := frpconf.ClientConfig(frpconf.ClientParams{
		ServerAddr: "127.0.0.1", ServerPort: frpsPort, MachineID: 1, Secret: "secret-of-machine-1",
		SSHLocalPort: echoPort, TunnelPort: sshPort, AgentLocalPort: echoPort, AgentPort: agentPort, AdminPort: 7400,
		Tunnels: tunnels, CA: string(ca.CertPEM), ServerName: tunnelca.ServerName, ConfigPath: clientPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(clientPath, []byte(client), 0o600)
	testutil.Start(t, "frps", "ip", "netns", "exec", vps, frps, "-c", serverPath)
	testutil.Eventually(t, 10*time.Second, "frps listening", func() error {
		if !strings.Contains(run(t, "ip", "netns", "exec", vps, "ss", "-Hltn"), fmt.Sprintf(":%d ", frpsPort)) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	testutil.Start(t, "frpc", "ip", "netns", "exec", vps, frpc, "-c", clientPath)
	return r
}

// TestOnlyPublicTunnelsListenOutside runs real frps and frpc, with configs
// from the daemon's renderer, in a "vps" network namespace and probes from
// a "client" namespace joined to it by veth: a machine's SSH and agent ports
// and a private tunnel are never reachable from outside, whatever bind_ip
// says, and are on 127.0.0.1 where the daemon reaches them; a public tcp
// or udp tunnel is reachable on every address, or only on bind_ip when it is set,
// and no longer once it is not public.
func TestOnlyPublicTunnelsListenOutside(t *testing.T) {
	needTools(t)
	ctx := context.Background()
	const privPort, pubPort = 20003, 20004
	const udpPriv, udpPub = 20005, 20006
	r := startVPS(t, func(vps string) []store.Tunnel {
		helper(t, vps, "echo", echoPort)
		return []store.Tunnel{
			{ID: 3, MachineID: 1, Kind: "tcp", LocalPort: echoPort, RemotePort: privPort},
			{ID: 4, MachineID: 1, Kind: "tcp", Public: true, LocalPort: echoPort, RemotePort: pubPort},
			{ID: 5, MachineID: 1, Kind: "udp", LocalPort: echoPort, RemotePort: udpPriv},
			{ID: 6, MachineID: 1, Kind: "udp", Public: true, LocalPort: echoPort, RemotePort: udpPub},
		}
	})
	vps, cli, vc, dir, st := r.vps, r.cli, r.vc, r.dir, r.st

	lo := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	at := func(ip string, p int) string { return fmt.Sprintf("%s:%d", ip, p) }
	udp := func(ip string, p int) string { return fmt.Sprintf("udp:%s:%d", ip, p) }
	testutil.Eventually(t, 15*time.Second, "every tunnel carries bytes on the vps's loopback", func() error {
		for k, v := range probe(t, vps, lo(sshPort), lo(agentPort), lo(privPort), lo(pubPort), udp("127.0.0.1", udpPriv), udp("127.0.0.1", udpPub)) {
			if v != "open" {
				return fmt.Errorf("%s %s", k, v)
			}
		}
		return nil
	})

	params := publish.Params{Ports: []int{pubPort}, UDPPorts: []int{udpPub}}
	svc := publish.New(publish.Options{
		Store: st, Run: cmdrun.Exec{Prefix: []string{"ip", "netns", "exec", vps}, Timeout: 20 * time.Second},
		RulesetPath: filepath.Join(dir, "publish.nft"),
		Params:      func(context.Context) (publish.Params, error) { return params, nil },
	})
	routeLocalnet := func() string {
		return strings.TrimSpace(run(t, "ip", "netns", "exec", vps, "sysctl", "-n", publish.Sysctl))
	}
	// A new namespace takes route_localnet from the host's (IPv4 devconf
	// is inherited): start from off, as on a box that never published.
	run(t, "ip", "netns", "exec", vps, "sysctl", "-q", "-w", publish.Sysctl+"=0")
	if routeLocalnet() != "0" {
		t.Fatal("route_localnet could not be turned off in the test's namespace")
	}
	expect(t, cli, "before publishing", map[string]string{
		at("10.199.77.1", sshPort): "closed", at("10.199.77.1", agentPort): "closed",
		at("10.199.77.1", privPort): "closed", at("10.199.77.1", pubPort): "closed",
		udp("10.199.77.1", udpPriv): "closed", udp("10.199.77.1", udpPub): "closed",
	})

	// bind_ip empty: the public tunnel on every address, nothing else.
	if err := svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, cli, "published on every address", map[string]string{
		at("10.199.77.1", pubPort): "open", at("10.199.77.3", pubPort): "open",
		at("10.199.77.1", sshPort): "closed", at("10.199.77.1", agentPort): "closed", at("10.199.77.1", privPort): "closed",
		udp("10.199.77.1", udpPub): "open", udp("10.199.77.3", udpPub): "open", udp("10.199.77.1", udpPriv): "closed",
	})
	if routeLocalnet() != "1" {
		t.Fatal("route_localnet not turned on while a tunnel is published")
	}
	// route_localnet would let a neighbour reach loopback services: a
	// client that routes 127.0.0.1 to the vps gets nothing while our guard
	// is loaded, and would reach the SSH port without it.
	run(t, "ip", "netns", "exec", cli, "sysctl", "-q", "-w", publish.Sysctl+"=1")
	run(t, "ip", "-n", cli, "rule", "add", "pref", "10", "lookup", "local")
	run(t, "ip", "-n", cli, "rule", "del", "pref", "0")
	run(t, "ip", "-n", cli, "rule", "add", "pref", "5", "to", "127.0.0.1", "lookup", "100")
	run(t, "ip", "-n", cli, "route", "add", "127.0.0.1/32", "via", "10.199.77.1", "dev", vc, "table", "100")
	expect(t, cli, "martian to the vps's loopback, guarded", map[string]string{lo(sshPort): "closed", lo(agentPort): "closed"})
	run(t, "ip", "netns", "exec", vps, "nft", "delete", "chain", "ip", "tunnelsvc_publish", "guard")
	expect(t, cli, "martian to the vps's loopback, guard removed by hand", map[string]string{lo(sshPort): "open"})
	if err := svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, cli, "martian to the vps's loopback, guard back", map[string]string{lo(sshPort): "closed"})
	run(t, "ip", "-n", cli, "rule", "del", "pref", "5")

	// bind_ip set: only there. The private ports stay closed on it too, and
	// the agent is still reached on the vps's loopback.
	params.BindIP = "10.199.77.3"
	if err := svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, cli, "published on bind_ip", map[string]string{
		at("10.199.77.3", pubPort): "open", at("10.199.77.1", pubPort): "closed",
		at("10.199.77.3", sshPort): "closed", at("10.199.77.3", agentPort): "closed", at("10.199.77.3", privPort): "closed",
		udp("10.199.77.3", udpPub): "open", udp("10.199.77.1", udpPub): "closed", udp("10.199.77.3", udpPriv): "closed",
	})
	expect(t, vps, "on the vps itself", map[string]string{
		lo(sshPort): "open", lo(agentPort): "open", lo(pubPort): "open", at("10.199.77.3", pubPort): "open",
	})

	// With the firewall in svc mode (its input chain drops by default),
	// the published port is still accepted on bind_ip.
	fw := firewall.New(firewall.Options{
		Store: st, Run: cmdrun.Exec{Prefix: []string{"ip", "netns", "exec", vps}, Timeout: 20 * time.Second},
		RulesetPath: filepath.Join(dir, "firewall.nft"),
		Ports: func(context.Context) (firewall.Ports, error) {
			return firewall.Ports{ControlPort: frpsPort, PrivatePorts: []int{sshPort, agentPort, privPort},
				PublicTCPPorts: []int{pubPort}, PublicUDPPorts: []int{udpPub}, BindIP: "10.199.77.3"}, nil
		},
	})
	rec := testutil.NewProgress()
	go fw.EnterSvc(ctx, rec)
	if !rec.Wait(t) {
		t.Fatalf("firewall svc mode: %s", rec.Text())
	}
	expect(t, cli, "published on bind_ip, firewall in svc mode", map[string]string{
		at("10.199.77.3", pubPort): "open", at("10.199.77.1", pubPort): "closed", at("10.199.77.3", sshPort): "closed",
		udp("10.199.77.3", udpPub): "open", udp("10.199.77.3", udpPriv): "closed",
	})

	// An IPv6 bind address cannot publish: nothing changes, and the
	// message says why.
	params.BindIP = "fd99::1"
	if err := svc.Reconcile(ctx); err == nil || !strings.Contains(err.Error(), "IPv4 only") {
		t.Fatalf("IPv6 bind: %v", err)
	}
	expect(t, cli, "after a refused change", map[string]string{at("10.199.77.3", pubPort): "open"})

	// No public tunnel left: the table goes and route_localnet is off again.
	params = publish.Params{BindIP: "10.199.77.3"}
	if err := svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, cli, "unpublished", map[string]string{at("10.199.77.3", pubPort): "closed", udp("10.199.77.3", udpPub): "closed"})
	if routeLocalnet() != "0" {
		t.Fatal("route_localnet left on with no public tunnel")
	}
	if tables := run(t, "ip", "netns", "exec", vps, "nft", "list", "tables"); strings.Contains(tables, "tunnelsvc_publish") {
		t.Fatalf("table left behind:\n%s", tables)
	}
}

// TestUnpublishScript: the package's removal takes away the table and the
// route_localnet it needed (packaging/unpublish.sh, run by preremove).
func TestUnpublishScript(t *testing.T) {
	needTools(t)
	ctx := context.Background()
	dir := t.TempDir()
	ns := newNetns(t)
	st, err := store.Open(ctx, filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	path := filepath.Join(dir, "publish.nft")
	svc := publish.New(publish.Options{
		Store: st, Run: cmdrun.Exec{Prefix: []string{"ip", "netns", "exec", ns}}, RulesetPath: path,
		Params: func(context.Context) (publish.Params, error) { return publish.Params{Ports: []int{20003}}, nil },
	})
	if err := svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		tables := run(t, "ip", "netns", "exec", ns, "nft", "list", "tables")
		return fmt.Sprintf("table:%t sysctl:%s", strings.Contains(tables, "tunnelsvc_publish"),
			strings.TrimSpace(run(t, "ip", "netns", "exec", ns, "sysctl", "-n", publish.Sysctl)))
	}
	if got := state(); got != "table:true sysctl:1" {
		t.Fatalf("after publishing: %s", got)
	}
	root, _ := testutil.RepoRoot()
	cmd := exec.Command("ip", "netns", "exec", ns, "sh", filepath.Join(root, "packaging", "unpublish.sh"))
	cmd.Env = append(os.Environ(), "TUNNELSVC_PUBLISH_NFT="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("unpublish.sh: %v\n%s", err, out)
	}
	if got := state(); got != "table:false sysctl:0" {
		t.Fatalf("after unpublish.sh: %s", got)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("ruleset file left: %v", err)
	}
}

// TestProxyProtocolThroughPublicTunnels: public tcp and udp tunnels with a
// PROXY protocol header, through real frps and frpc and the kernel's
// DNAT, to Debian's nginx (tcp, v1 and v2) and a udp service reading v2:
// each names the client's own address in the other namespace, not
// 127.0.0.1, in its answer and in its log.
func TestProxyProtocolThroughPublicTunnels(t *testing.T) {
	needTools(t)
	const v1Port, v2Port, udpPort = 20007, 20008, 20009
	const nginxV1, nginxV2, udpService = 9101, 9102, 9103
	var nginx *testutil.Nginx
	r := startVPS(t, func(vps string) []store.Tunnel {
		helper(t, vps, "echo", echoPort)
		nginx = testutil.StartNginx(t, vps, testutil.NginxPort{Port: nginxV1, ProxyProtocol: true}, testutil.NginxPort{Port: nginxV2, ProxyProtocol: true})
		helper(t, vps, "ppudp", udpService)
		return []store.Tunnel{
			{ID: 7, MachineID: 1, Kind: "tcp", Public: true, LocalPort: nginxV1, RemotePort: v1Port, ProxyProtocol: "v1"},
			{ID: 8, MachineID: 1, Kind: "tcp", Public: true, LocalPort: nginxV2, RemotePort: v2Port, ProxyProtocol: "v2"},
			{ID: 9, MachineID: 1, Kind: "udp", Public: true, LocalPort: udpService, RemotePort: udpPort, ProxyProtocol: "v2"},
		}
	})
	svc := publish.New(publish.Options{
		Store: r.st, Run: cmdrun.Exec{Prefix: []string{"ip", "netns", "exec", r.vps}, Timeout: 20 * time.Second},
		RulesetPath: filepath.Join(r.dir, "publish.nft"),
		Params: func(context.Context) (publish.Params, error) {
			return publish.Params{Ports: []int{v1Port, v2Port}, UDPPorts: []int{udpPort}}, nil
		},
	})
	run(t, "ip", "netns", "exec", r.vps, "sysctl", "-q", "-w", publish.Sysctl+"=0")
	if err := svc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	const client = "10.199.77.2"
	for _, port := range []int{v1Port, v2Port} {
		url := fmt.Sprintf("http://10.199.77.1:%d/", port)
		var got string
		testutil.Eventually(t, 15*time.Second, "nginx through the tcp tunnel at "+url, func() error {
			out, err := exec.Command("ip", "netns", "exec", r.cli, "curl", "-sS", "--max-time", "3", url).CombinedOutput()
			got = strings.TrimSpace(string(out))
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		if !strings.HasPrefix(got, "pp="+client+" remote="+client+" ") {
			t.Fatalf("through port %d nginx saw %q, want the client %s", port, got, client)
		}
	}
	if logged := nginx.Logged(t); strings.Count(logged, "pp="+client+" ") != 2 || strings.Contains(logged, "pp=127.0.0.1") {
		t.Fatalf("nginx's log:\n%s", logged)
	}
	var got string
	testutil.Eventually(t, 15*time.Second, "the udp service through the tunnel", func() error {
		cmd := exec.Command("ip", "netns", "exec", r.cli, os.Args[0])
		cmd.Env = append(os.Environ(), helperEnv+"=udpask", fmt.Sprintf("TARGET=10.199.77.1:%d", udpPort))
		out, _ := cmd.Output()
		if got = string(out); !strings.HasPrefix(got, "pp=") {
			return fmt.Errorf("%q", got)
		}
		return nil
	})
	if got != "pp="+client+" v2" {
		t.Fatalf("the udp service saw %q, want pp=%s v2", got, client)
	}
}
