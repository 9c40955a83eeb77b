package systemtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/pgtest"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testbed"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// The two-edge network: the machine has a link to each edge, and so has
// the database's host; the edges reach each other through neither.
const (
	edgeAIP      = "10.213.31.1" // edge A, as the machine reaches it
	edgeMachineA = "10.213.31.2"
	edgeBIP      = "10.213.32.1" // edge B, as the machine reaches it
	edgeMachineB = "10.213.32.2"
	pgForA       = "10.213.33.2" // the database, as edge A reaches it
	pgForB       = "10.213.34.2" // and as edge B does
	// The database's own address, on its host's loopback, routed by each
	// edge through its link: the one address every edge of the cluster
	// dials, whichever edge is down.
	pgAddr     = "10.213.30.1"
	pgPassword = "edge-test-database"
	// The second machine has a link to each edge too; it reaches each
	// edge's address (above) through that link.
	m2LinkA, m2OnA = "10.213.35.1", "10.213.35.2"
	m2LinkB, m2OnB = "10.213.36.1", "10.213.36.2"
	// The operator's computer (the SSH client) has a link to each edge and
	// jumps through the edge's own sshd at the edge's end of that link.
	opLinkA, opOnA = "10.213.37.1", "10.213.37.2"
	opLinkB, opOnB = "10.213.38.1", "10.213.38.2"
	// The edges' own link, as between two VPSes on the Internet: an ACME
	// challenge one edge did not order is relayed over it.
	peerA, peerB = "10.213.39.1", "10.213.39.2"
	// The ACME CA (Pebble) and its DNS (pebble-challtestsrv) run on the
	// database's host. Each edge reaches it as "pebble" (the name in
	// Pebble's own test certificate).
	edgeDomain  = "example.test"
	edgeACMEDir = "https://pebble:14000/dir"
	edgeACMECA  = "/etc/tunnelsvc/acme-ca-root.pem"
)

// TestTwoEdges: two edges on one PostgreSQL on its own host, a machine
// joined through edge A with the one-line bootstrap, a second machine
// joined through edge B, and the operator's computer. Edge B is added as
// the docs say: the package installed, then `tunnelsvc edge join` as
// Edges → Add an edge gives it, run twice; its packaged daemon reads the
// database URL as a systemd credential. Without anyone
// touching the machine it gets a tunnel client for edge B too, and a TCP
// tunnel made on edge B answers through both edges; so does one made on
// A for the machine that joined through B. `ssh -J root@<edge>` reaches
// the machine through each edge, with the key the dashboard hands out.
// PostgreSQL stops for 60 s: the tunnel keeps answering through both,
// writes answer 503, B's packaged daemon is not restarted by its watchdog,
// and both edges write again within 10 s of its return.
// Each edge gets its own certificates from Pebble, validating for real
// with its DNS sending each name to the other edge (the edges relay the
// challenges they did not order), and serves verified HTTPS for the
// dashboard and an HTTP tunnel; behind a password gate, a session made
// through A lets the operator in through B, and through both while the
// database is away.
// Edge A is powered off: tunnels, HTTPS and SSH still answer through B,
// the operator logs in on B, and a tunnel made on B then reaches the
// machine. Edge A is powered on again: with no one touching anything, it
// serves the tunnel made while it was off, and HTTPS and SSH again.
func TestTwoEdges(t *testing.T) {
	parallel(t)
	bin := buildDaemon(t)
	static := buildStatic(t)
	frps, _ := testutil.FRP()

	pg := testbed.Boot(t, "pg")
	ea := testbed.Boot(t, "edge-a")
	eb := testbed.Boot(t, "edge-b")
	m := testbed.Boot(t, "machine")
	m2 := testbed.Boot(t, "machine-2")
	op := testbed.Boot(t, "operator")
	// Edge A's links, again after it is powered on.
	linkA := func() {
		t.Helper()
		testbed.JoinNamed(t, m, "eth0", edgeMachineA+"/24", ea, "eth0", edgeAIP+"/24")
		testbed.JoinNamed(t, pg, "eth0", pgForA+"/24", ea, "eth1", "10.213.33.1/24")
		ea.Must("ip", "route", "replace", pgAddr+"/32", "via", pgForA)
		testbed.JoinNamed(t, m2, "eth0", m2OnA+"/24", ea, "eth2", m2LinkA+"/24")
		testbed.JoinNamed(t, op, "eth0", opOnA+"/24", ea, "eth3", opLinkA+"/24")
		m2.Must("ip", "route", "replace", edgeAIP+"/32", "via", m2LinkA)
		testbed.JoinNamed(t, ea, "eth4", peerA+"/24", eb, "eth4", peerB+"/24")
		ea.Must("ip", "route", "replace", edgeBIP+"/32", "via", peerB)
		eb.Must("ip", "route", "replace", edgeAIP+"/32", "via", peerA)
	}
	linkA()
	testbed.JoinNamed(t, m, "eth1", edgeMachineB+"/24", eb, "eth0", edgeBIP+"/24")
	testbed.JoinNamed(t, pg, "eth1", pgForB+"/24", eb, "eth1", "10.213.34.1/24")
	eb.Must("ip", "route", "replace", pgAddr+"/32", "via", pgForB)
	pg.Must("ip", "addr", "add", pgAddr+"/32", "dev", "lo")
	testbed.JoinNamed(t, m2, "eth1", m2OnB+"/24", eb, "eth2", m2LinkB+"/24")
	testbed.JoinNamed(t, op, "eth1", opOnB+"/24", eb, "eth3", opLinkB+"/24")
	m2.Must("ip", "route", "replace", edgeBIP+"/32", "via", m2LinkB)

	// PostgreSQL 15 from Debian, its own cluster, password logins from the
	// edges' links.
	pg.WriteFile("/tmp/pgpw", []byte(pgPassword+"\n"), 0o644) // initdb reads it as postgres
	pg.Must("sh", "-c", `set -e
		mkdir -p /var/lib/pgtb && chown postgres:postgres /var/lib/pgtb
		runuser -u postgres -- `+pgtest.BinDir+`/initdb -D /var/lib/pgtb -U postgres --pwfile=/tmp/pgpw -A scram-sha-256 >/dev/null
		echo "host all all 10.213.0.0/16 scram-sha-256" >>/var/lib/pgtb/pg_hba.conf`)
	startPG := func() {
		t.Helper()
		pg.Must("systemd-run", "--unit=pgtb", "-p", "User=postgres", pgtest.BinDir+"/postgres", "-D", "/var/lib/pgtb",
			"-c", "listen_addresses=*", "-c", "unix_socket_directories=/tmp")
	}
	startPG()
	testutil.Eventually(t, 30*time.Second, "PostgreSQL takes the database", func() error {
		_, err := pg.Exec("sh", "-c", "PGPASSWORD="+pgPassword+" psql -h 127.0.0.1 -U postgres -qc 'CREATE DATABASE tunnelsvc'")
		return err
	})

	// Pebble validates for real (no PEBBLE_VA_ALWAYS_VALID), asking its
	// DNS, which sends router.<domain> to A and web.<domain> to B. Both
	// edges order both: B's router and A's web are validated through the
	// other edge, which relays the challenge.
	certs := pebbleTestCerts(t)
	pebbleBin, challBin := buildPebble(t)
	pg.CopyIn(pebbleBin, "/usr/local/bin/pebble", 0o755)
	pg.CopyIn(challBin, "/usr/local/bin/pebble-challtestsrv", 0o755)
	pg.CopyIn(filepath.Join(certs, "localhost", "cert.pem"), "/etc/pebble/cert.pem", 0o644)
	pg.CopyIn(filepath.Join(certs, "localhost", "key.pem"), "/etc/pebble/key.pem", 0o600)
	pg.CopyIn(filepath.Join(certs, "pebble.minica.pem"), "/etc/pebble/minica.pem", 0o644)
	pebbleCfg, _ := json.Marshal(map[string]any{"pebble": map[string]any{
		"listenAddress": "0.0.0.0:14000", "managementListenAddress": "127.0.0.1:15000",
		"certificate": "/etc/pebble/cert.pem", "privateKey": "/etc/pebble/key.pem",
		"httpPort": 80, "tlsPort": 443, "ocspResponderURL": "", "externalAccountBindingRequired": false,
		"retryAfter": map[string]int{"authz": 0, "order": 0},
	}})
	pg.WriteFile("/etc/pebble/pebble.json", pebbleCfg, 0o644)
	pg.Must("systemd-run", "--unit=challtestsrv", "/usr/local/bin/pebble-challtestsrv", "-dns01", "127.0.0.1:8053",
		"-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", "", "-management", "127.0.0.1:8055", "-defaultIPv4", "", "-defaultIPv6", "")
	pg.Must("systemd-run", "--unit=pebble", "-E", "PEBBLE_VA_NOSLEEP=1", "-E", "PEBBLE_WFE_NONCEREJECT=0",
		"/usr/local/bin/pebble", "-config", "/etc/pebble/pebble.json", "-dnsserver", "127.0.0.1:8053")
	for name, addr := range map[string]string{"router." + edgeDomain: "10.213.33.1", "web." + edgeDomain: "10.213.34.1"} {
		testutil.Eventually(t, 30*time.Second, "the DNS says "+name+" is "+addr, func() error {
			_, err := pg.Exec("curl", "-fsS", "--max-time", "2", "-d", fmt.Sprintf(`{"host":%q,"addresses":[%q]}`, name, addr), "http://127.0.0.1:8055/add-a")
			return err
		})
	}
	testutil.Eventually(t, 30*time.Second, "Pebble's directory answers", func() error {
		_, err := pg.Exec("curl", "-fsS", "--max-time", "2", "--cacert", "/etc/pebble/minica.pem", "-o", "/dev/null", "https://127.0.0.1:14000/dir")
		return err
	})
	pebbleRoot := pg.Must("curl", "-fsS", "--max-time", "5", "--cacert", "/etc/pebble/minica.pem", "https://127.0.0.1:15000/roots/0")

	journal := func() string {
		var b strings.Builder
		for _, h := range []*testbed.Host{ea, eb} {
			out, _ := h.Exec("journalctl", "--no-pager", "-n", "30", "-u", "tunnelsvc-test", "-u", "tunnelsvc", "-u", "revtunnel-server")
			fmt.Fprintf(&b, "%s:\n%s\n", h.Name, out)
		}
		out, _ := m.Exec("sh", "-c", "journalctl --no-pager -n 40 -u 'revtunnel-client*' -u tunnel-agent; ls -l /etc/revtunnel")
		out2, _ := m2.Exec("sh", "-c", "journalctl --no-pager -n 20 -u 'revtunnel-client*' -u tunnel-agent")
		return b.String() + "machine:\n" + out + "machine-2:\n" + out2
	}
	var sshd func(h *testbed.Host)
	startEdge := func(h *testbed.Host, name, addr, dbAddr string) *vps {
		t.Helper()
		installServer(t, h, bin, frps, static)
		// Caddy as the package sets it up: the distribution's caddy.service
		// with tunnelsvc's drop-in, serving tunnelsvc's Caddyfile. The CA's
		// name, and the root its own HTTPS listener chains to.
		root := testbed.Root(t)
		h.CopyIn(filepath.Join(root, "packaging", "caddy-run"), "/usr/lib/tunnelsvc/caddy-run", 0o755)
		h.CopyIn(filepath.Join(root, "packaging", "caddy-tunnelsvc.conf"), "/etc/systemd/system/caddy.service.d/tunnelsvc.conf", 0o644)
		h.CopyIn(filepath.Join(certs, "pebble.minica.pem"), edgeACMECA, 0o644)
		h.Must("sh", "-c", "echo '"+dbAddr+" pebble' >>/etc/hosts")
		// Enabled, as the package's unit is: it starts again at boot.
		h.WriteFile("/etc/systemd/system/tunnelsvc-test.service", []byte(fmt.Sprintf(`[Unit]
Description=tunnelsvc (edge %s)
After=network.target
[Service]
ExecStart=/usr/bin/tunnelsvc serve --listen 0.0.0.0:7380 --data-dir /var/lib/tunnelsvc --base-url http://%s:7380 --server-host %s --static-dir /usr/lib/tunnelsvc/static --bin-dir /usr/lib/tunnelsvc --edge-name %s --database postgres://postgres:%s@%s:5432/tunnelsvc?sslmode=disable
Restart=always
RestartSec=1
[Install]
WantedBy=multi-user.target
`, name, addr, addr, name, pgPassword, dbAddr)), 0o644)
		h.Must("systemctl", "daemon-reload")
		h.Must("systemctl", "enable", "--now", "tunnelsvc-test")
		sshd(h)
		jar, _ := cookiejar.New(nil)
		v := &vps{Host: h, t: t, client: &http.Client{Jar: jar, Timeout: 30 * time.Second,
			Transport: &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true}}}
		testutil.Eventually(t, 30*time.Second, name+" answers", func() error {
			_, err := h.Exec("curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:7380/healthz")
			return err
		})
		return v
	}
	// The edge's own sshd, for the operator's jumps (dropbear, key logins
	// only), enabled as the edge's units are.
	sshd = func(h *testbed.Host) {
		t.Helper()
		h.Must("mkdir", "-p", "/etc/dropbear-test")
		h.Must("dropbearkey", "-t", "ed25519", "-f", "/etc/dropbear-test/host_ed25519")
		h.WriteFile("/etc/systemd/system/sshd-test.service", []byte(`[Service]
ExecStart=/usr/sbin/dropbear -F -E -s -p 22 -r /etc/dropbear-test/host_ed25519
[Install]
WantedBy=multi-user.target
`), 0o644)
		h.Must("systemctl", "daemon-reload")
		h.Must("systemctl", "enable", "--now", "sshd-test")
	}
	// The install on each edge (Setup): the web proxy for the domain, and
	// the tunnel server, both enabled.
	install := func(v *vps, addr string) {
		t.Helper()
		v.data("POST", "/api/local/install", fmt.Sprintf(`{"domain":%q,"server_host":%q}`, edgeDomain, addr), 200)
		testutil.Eventually(t, 90*time.Second, v.Name+"'s install", func() error {
			st := v.data("GET", "/api/local/status", "", 200)
			outcomes, _ := st["outcomes"].(map[string]any)
			inst, _ := outcomes["install"].(map[string]any)
			if st["operation"] != nil || inst["ok"] != true {
				return fmt.Errorf("status %v", st)
			}
			if _, err := v.Exec("sh", "-c", "systemctl is-active revtunnel-server caddy && ss -ltn | grep -q ':7000 '"); err != nil {
				return fmt.Errorf("%v\n%s", err, journal())
			}
			return nil
		})
	}

	a := startEdge(ea, "edge-a", edgeAIP, pgAddr)
	a.data("POST", "/api/auth/setup", `{"password":"`+password+`"}`, 200)
	a.data("PUT", "/api/local/acme", fmt.Sprintf(`{"acme_ca":%q,"acme_ca_root":%q}`, edgeACMEDir, edgeACMECA), 200)
	// A's Caddy orders router.<domain> at its install, and the CA asks A:
	// its dashboard is then at https://router.<domain>, where B joins.
	install(a, edgeAIP)

	// Edge B as docs/edges.md has the operator add it: the package, then
	// the command Edges → Add an edge gives, run as root.
	var b *vps
	t.Run("edge B joins from the package with the command A gives", func(t *testing.T) {
		b = joinFromPackage(t, a, eb, sshd, certs, pebbleRoot)
	})
	if t.Failed() {
		return
	}
	// B's Caddy orders router.<domain> at its install; the CA asks A,
	// which relays the challenge to B.
	install(b, edgeBIP)

	// The machine: a web server on its loopback, then the one line,
	// through edge A.
	m.Must("sh", "-c", "echo '127.0.1.1 machine' >>/etc/hosts; mkdir -p /srv/web && echo 'hello from the machine' >/srv/web/index.html")
	m.Must("systemd-run", "--unit=web", "python3", "-m", "http.server", "8080", "--bind", "127.0.0.1", "--directory", "/srv/web")
	tok := a.data("POST", "/api/bootstrap/tokens", `{}`, 200)
	m.WriteFile("/root/bootstrap.sh", []byte(a.do("GET", "/static/bootstrap.sh", "").raw), 0o755)
	if out, err := m.Exec("env", "TUNNEL_MACHINE_NAME=nas", "setsid", "bash", "/root/bootstrap.sh", tok["token"].(string)); err != nil {
		t.Fatalf("bootstrap: %v\n%s\n%s", err, out, journal())
	}

	t.Run("a client for each edge, without touching the machine", func(t *testing.T) {
		testutil.Eventually(t, 60*time.Second, "the machine runs a client for edge B, and both edges have it", func() error {
			if _, err := m.Exec("systemctl", "is-active", "revtunnel-client.service", "revtunnel-client@edge-b.service"); err != nil {
				return fmt.Errorf("%v\n%s", err, journal())
			}
			ms := b.machines()
			if len(ms) != 1 {
				return fmt.Errorf("machines on B: %v", ms)
			}
			edges, _ := ms[0]["edges"].([]any)
			online := 0
			for _, e := range edges {
				if e.(map[string]any)["status"] == "online" {
					online++
				}
			}
			if online != 2 {
				return fmt.Errorf("the machine's edges: %v\n%s", edges, journal())
			}
			return nil
		})
		if cfg := m.Must("cat", "/etc/revtunnel/client-edge-b.toml"); !strings.Contains(cfg, "serverAddr = '"+edgeBIP+"'") {
			t.Fatalf("edge B's client config:\n%s", cfg)
		}
		// The machine's frpc (edge A's bundle) speaks frp's wire protocol
		// v2, and so does A's frps: its client asks for it once the agent
		// has said which frpc it runs. B runs the previous package's frps,
		// which does not: its client keeps v1, and stays connected.
		testutil.Eventually(t, 60*time.Second, "the client for edge A asks for wire protocol v2", func() error {
			if cfg := m.Must("cat", "/etc/revtunnel/client.toml"); !strings.Contains(cfg, "serverAddr = '"+edgeAIP+"'") || !strings.Contains(cfg, "wireProtocol = 'v2'") {
				return fmt.Errorf("the main client config:\n%s", cfg)
			}
			return nil
		})
		if cfg := m.Must("cat", "/etc/revtunnel/client-edge-b.toml"); strings.Contains(cfg, "wireProtocol") {
			t.Fatalf("edge B runs the previous frps, and its client asks for a wire protocol:\n%s", cfg)
		}
	})
	if t.Failed() {
		return
	}

	var id float64
	for _, x := range b.machines() {
		id, _ = x["id"].(float64)
	}
	tunnel := func(name string) int {
		t.Helper()
		d := b.data("POST", "/api/tunnels", fmt.Sprintf(`{"machine_id":%d,"name":%q,"kind":"tcp","local_port":8080}`, int(id), name), 201)
		port, _ := d["remote_port"].(float64)
		if port == 0 {
			t.Fatalf("tunnel %s: %v", name, d)
		}
		return int(port)
	}
	through := func(h *testbed.Host, port int) error {
		out, err := h.Exec("curl", "-fsS", "--max-time", "3", fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err != nil || !strings.Contains(out, "hello from the machine") {
			return fmt.Errorf("through %s: %v %q", h.Name, err, out)
		}
		return nil
	}

	port := tunnel("web")
	t.Run("a tunnel made on B answers through both edges", func(t *testing.T) {
		testutil.Eventually(t, 60*time.Second, "the tunnel answers on A and on B", func() error {
			if err := through(eb, port); err != nil {
				return err
			}
			return through(ea, port)
		})
	})

	// SSH: the machine's sshd on its loopback (dropbear); the operator's
	// key on each edge's sshd; the machine's key from the dashboard.
	m.Must("mkdir", "-p", "/etc/dropbear-test")
	m.Must("dropbearkey", "-t", "ed25519", "-f", "/etc/dropbear-test/host_ed25519")
	m.Must("systemd-run", "--unit=sshd-test", "/usr/sbin/dropbear", "-F", "-E", "-s", "-p", "127.0.0.1:22", "-r", "/etc/dropbear-test/host_ed25519")
	op.Must("sh", "-c", `set -e
		mkdir -p -m 700 /root/.ssh
		ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519
		printf 'Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  BatchMode yes\n  ConnectTimeout 5\n  LogLevel ERROR\n' >/root/.ssh/config`)
	for _, h := range []*testbed.Host{ea, eb} {
		h.Must("mkdir", "-p", "-m", "700", "/root/.ssh")
		h.WriteFile("/root/.ssh/authorized_keys", []byte(op.Must("cat", "/root/.ssh/id_ed25519.pub")), 0o600)
	}
	var keyID string
	for _, k := range a.list("/api/local/ssh-keys") {
		if k["is_default"] == true {
			keyID, _ = k["id"].(string)
		}
	}
	priv := a.do("POST", "/api/local/ssh-keys/"+keyID+"/download", `{"password":"`+password+`"}`)
	if priv.status != http.StatusOK || !strings.Contains(priv.raw, "PRIVATE KEY") {
		t.Fatalf("the machine key's download: %d %.200s", priv.status, priv.raw)
	}
	op.WriteFile("/root/tunnel_id_rsa", []byte(priv.raw), 0o600)
	sshPort := 0
	for _, x := range b.machines() {
		sshPort = int(x["tunnel_port"].(float64))
	}
	// ssh -J root@<edge> -p <port> root@127.0.0.1, as the dashboard says.
	sshVia := func(link string) error {
		out, err := op.Exec("ssh", "-i", "/root/tunnel_id_rsa", "-J", "root@"+link, "-p", strconv.Itoa(sshPort), "root@127.0.0.1", "echo", "ssh-to-the-machine")
		if err != nil || strings.TrimSpace(out) != "ssh-to-the-machine" {
			return fmt.Errorf("ssh -J root@%s: %v %q", link, err, out)
		}
		return nil
	}
	t.Run("ssh -J through each edge", func(t *testing.T) {
		for _, link := range []string{opLinkA, opLinkB} {
			testutil.Eventually(t, 30*time.Second, "ssh through "+link, func() error { return sshVia(link) })
		}
	})

	// The second machine joins through edge B.
	var port2m int
	t.Run("a second machine joined through B is reachable through A", func(t *testing.T) {
		m2.Must("sh", "-c", "echo '127.0.1.1 machine-2' >>/etc/hosts; mkdir -p /srv/web && echo 'hello from the machine' >/srv/web/index.html")
		m2.Must("systemd-run", "--unit=web", "python3", "-m", "http.server", "8080", "--bind", "127.0.0.1", "--directory", "/srv/web")
		tok := b.data("POST", "/api/bootstrap/tokens", `{}`, 200)
		m2.WriteFile("/root/bootstrap.sh", []byte(b.do("GET", "/static/bootstrap.sh", "").raw), 0o755)
		if out, err := m2.Exec("env", "TUNNEL_MACHINE_NAME=nas-2", "setsid", "bash", "/root/bootstrap.sh", tok["token"].(string)); err != nil {
			t.Fatalf("bootstrap through B: %v\n%s\n%s", err, out, journal())
		}
		if cfg := m2.Must("cat", "/etc/revtunnel/client.toml"); !strings.Contains(cfg, "serverAddr = '"+edgeBIP+"'") {
			t.Fatalf("machine-2's main client does not dial edge B:\n%s", cfg)
		}
		testutil.Eventually(t, 60*time.Second, "machine-2 runs a client for edge A", func() error {
			_, err := m2.Exec("systemctl", "is-active", "revtunnel-client@edge-a.service")
			return err
		})
		var id2 float64
		for _, x := range a.machines() {
			if x["name"] == "nas-2" {
				id2, _ = x["id"].(float64)
			}
		}
		d := a.data("POST", "/api/tunnels", fmt.Sprintf(`{"machine_id":%d,"name":"web-m2","kind":"tcp","local_port":8080}`, int(id2)), 201)
		port2m = int(d["remote_port"].(float64))
		testutil.Eventually(t, 60*time.Second, "machine-2's tunnel made on A answers through A and B", func() error {
			if err := through(ea, port2m); err != nil {
				return fmt.Errorf("%v\n%s", err, journal())
			}
			return through(eb, port2m)
		})
	})

	// Verified HTTPS through each edge: the operator's computer trusts
	// Pebble's root, and asks each edge for each name (as DNS round robin
	// would send it to either).
	op.WriteFile("/root/pebble-root.pem", []byte(pebbleRoot), 0o644)
	// The operator's browser: one cookie jar for every edge, as behind one
	// name (a gate session made through one edge is sent to the other).
	httpsVia := func(link, name, path, want string) error {
		out, err := op.Exec("curl", "-fsS", "--max-time", "5", "--cacert", "/root/pebble-root.pem", "-b", "/root/jar", "-c", "/root/jar",
			"--resolve", name+":443:"+link, "https://"+name+path)
		if err != nil || !strings.Contains(out, want) {
			return fmt.Errorf("https://%s%s through %s: %v %q", name, path, link, err, out)
		}
		return nil
	}
	httpsAll := func(links ...string) error {
		for _, link := range links {
			if err := httpsVia(link, "web."+edgeDomain, "/", "hello from the machine"); err != nil {
				return err
			}
			// The dashboard's page (its /healthz says 503 while the
			// database is away).
			if err := httpsVia(link, "router."+edgeDomain, "/", "<title>tunnelsvc</title>"); err != nil {
				return err
			}
		}
		return nil
	}
	var webID float64
	t.Run("verified HTTPS through each edge, certificates validated through the other", func(t *testing.T) {
		webID = b.data("POST", "/api/tunnels", fmt.Sprintf(`{"machine_id":%d,"name":"web-https","kind":"http","local_port":8080,"subdomain":"web"}`, int(id)), 201)["id"].(float64)
		d := testutil.Eventually(t, 180*time.Second, "https://web and https://router through both edges", func() error {
			if err := httpsAll(opLinkA, opLinkB); err != nil {
				var b strings.Builder
				for _, h := range []*testbed.Host{ea, eb} {
					out, _ := h.Exec("sh", "-c", "journalctl --no-pager -u caddy | grep -i 'challenge' | tail -n 4 | cut -c1-700")
					fmt.Fprintf(&b, "%s's caddy:\n%s\n", h.Name, out)
				}
				out, _ := pg.Exec("curl", "-sS", "--max-time", "9", "-H", "Host: router."+edgeDomain, "http://10.213.34.1/.well-known/acme-challenge/probe-token")
				fmt.Fprintf(&b, "a probe of B's relay from the CA's host: %s\n", out)
				out, _ = eb.Exec("curl", "-sS", "--max-time", "5", "-H", "Host: router."+edgeDomain, "-H", "X-Tunnelsvc-Acme-Relay: 1", "http://"+edgeAIP+"/.well-known/acme-challenge/probe-token")
				fmt.Fprintf(&b, "B asking A as the relay does: %s\n", out)
				return fmt.Errorf("%v\n%s", err, b.String())
			}
			return nil
		})
		t.Logf("both edges served both names with Pebble's certificates %s after the HTTP tunnel was made", d.Round(time.Millisecond))
		// Each edge (its own ACME account) had both names validated, the
		// CA asking A for web and B for router: two of the four were
		// answered by the other edge's relay.
		log := pg.Must("journalctl", "--no-pager", "-u", "pebble")
		if n := strings.Count(log, "set VALID by completed challenge"); n < 4 {
			t.Errorf("Pebble validated %d authorizations, want 4 (two names, two edges):\n%s", n, log)
		}
	})

	// From here on the web tunnel is behind a password gate: the checks
	// through either edge carry the session the operator made through A.
	t.Run("a password gate: signed in through A, let in through B", func(t *testing.T) {
		b.data("PATCH", fmt.Sprintf("/api/tunnels/%d", int(webID)), `{"access":"password","password":"gate-pass-Orchard-42"}`, 200)
		testutil.Eventually(t, 15*time.Second, "both edges ask for the password", func() error {
			for _, link := range []string{opLinkA, opLinkB} {
				out, _ := op.Exec("curl", "-sS", "--max-time", "5", "--cacert", "/root/pebble-root.pem", "-o", "/dev/null", "-w", "%{http_code}",
					"--resolve", "web."+edgeDomain+":443:"+link, "https://web."+edgeDomain+"/")
				if out == "200" {
					return fmt.Errorf("%s let a request without a session in", link)
				}
			}
			return nil
		})
		op.Must("curl", "-fsS", "--max-time", "5", "--cacert", "/root/pebble-root.pem", "-c", "/root/jar", "-o", "/dev/null",
			"--resolve", "web."+edgeDomain+":443:"+opLinkA, "-d", "password=gate-pass-Orchard-42", "-d", "next=/",
			"https://web."+edgeDomain+"/.tunnelsvc/login")
		if jar := op.Must("cat", "/root/jar"); !strings.Contains(jar, "tunnelsvc_gate") {
			t.Fatalf("no gate session after signing in through A:\n%s", jar)
		}
		if err := httpsAll(opLinkB, opLinkA); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("PostgreSQL stopped for 60 s", func(t *testing.T) {
		// B runs the package's unit, whose watchdog (WatchdogSec=) would
		// restart a daemon that stopped pinging it.
		pidB := eb.Must("systemctl", "show", "-p", "MainPID", "--value", "tunnelsvc.service")
		pg.Must("systemctl", "stop", "pgtb")
		down := time.Now()
		rounds, writes := 0, 0
		for time.Since(down) < 60*time.Second {
			for _, h := range []*testbed.Host{ea, eb} {
				if err := through(h, port); err != nil {
					t.Fatalf("%s into the outage: %v\n%s", time.Since(down).Round(time.Second), err, journal())
				}
			}
			if err := httpsAll(opLinkA, opLinkB); err != nil {
				t.Fatalf("%s into the outage: %v", time.Since(down).Round(time.Second), err)
			}
			if err := sshVia(opLinkA); err != nil {
				t.Fatalf("%s into the outage: %v", time.Since(down).Round(time.Second), err)
			}
			rounds++
			if writes < 2 {
				ans := b.do("POST", "/api/bootstrap/tokens", `{}`)
				if ans.status != http.StatusServiceUnavailable || !strings.Contains(ans.raw, "database unavailable") {
					t.Fatalf("a write on B while the database is gone: %d %s", ans.status, ans.raw)
				}
				writes++
			}
			time.Sleep(3 * time.Second)
		}
		t.Logf("60 s without the database: %d rounds through both edges passed; writes answered 503", rounds)
		if now := eb.Must("systemctl", "show", "-p", "MainPID", "--value", "tunnelsvc.service"); now != pidB {
			t.Fatalf("B's packaged daemon was restarted during the outage (MainPID %s, then %s)\n%s", strings.TrimSpace(pidB), strings.TrimSpace(now), journal())
		}
		startPG()
		d := testutil.Eventually(t, 10*time.Second, "a write on each edge", func() error {
			for _, v := range []*vps{a, b} {
				if ans := v.do("POST", "/api/bootstrap/tokens", `{}`); ans.status != http.StatusOK {
					return fmt.Errorf("%s: %d %s", v.Name, ans.status, ans.raw)
				}
			}
			return nil
		})
		t.Logf("writes worked on both edges %s after the database came back", d.Round(time.Millisecond))
	})

	var port2 int
	t.Run("edge A powered off", func(t *testing.T) {
		ea.PowerOff()
		if err := through(eb, port); err != nil {
			t.Fatalf("the tunnel through B after A's death: %v\n%s", err, journal())
		}
		if port2m != 0 {
			if err := through(eb, port2m); err != nil {
				t.Fatalf("machine-2's tunnel through B after A's death: %v", err)
			}
		}
		if err := sshVia(opLinkB); err != nil {
			t.Fatalf("ssh through B after A's death: %v\n%s", err, journal())
		}
		if err := httpsAll(opLinkB); err != nil {
			t.Fatalf("HTTPS through B after A's death: %v", err)
		}
		jar, _ := cookiejar.New(nil)
		fresh := &vps{Host: eb, t: t, client: &http.Client{Jar: jar, Timeout: 30 * time.Second,
			Transport: &http.Transport{DialContext: eb.DialContext, DisableKeepAlives: true}}}
		fresh.data("POST", "/api/auth/login", `{"password":"`+password+`"}`, 200)
		port2 = tunnel("web-2")
		testutil.Eventually(t, 60*time.Second, "a tunnel made on B after A's death answers through B", func() error {
			if err := through(eb, port2); err != nil {
				return fmt.Errorf("%v\n%s", err, journal())
			}
			return nil
		})
	})
	if port2 == 0 {
		return
	}

	t.Run("edge A powered on again", func(t *testing.T) {
		ea.PowerOn()
		// Its links come back (the old ends went with its network).
		for _, h := range []*testbed.Host{m, pg, m2, op} {
			h.Exec("ip", "link", "del", "eth0")
		}
		eb.Exec("ip", "link", "del", "eth4")
		linkA()
		up := testutil.Eventually(t, 60*time.Second, "edge A's daemon answers", func() error {
			_, err := ea.Exec("curl", "-fsS", "-o", "/dev/null", "--max-time", "2", "http://127.0.0.1:7380/healthz")
			return err
		})
		t0 := time.Now()
		testutil.Eventually(t, 60*time.Second, "the tunnel made while A was off answers through A", func() error {
			if err := through(ea, port2); err != nil {
				return fmt.Errorf("%v\n%s", err, journal())
			}
			return nil
		})
		t.Logf("edge A: daemon answering %s after boot; the tunnel made on B while A was off served through A %s after that",
			up.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
		// Its other tunnels (each opens as frpc logs in), and machine-2's,
		// whose client for A is not its home edge's: restarted through
		// PUT /clients.
		testutil.Eventually(t, 60*time.Second, "every tunnel through A after it came back", func() error {
			for _, p := range []int{port, port2m} {
				if err := through(ea, p); err != nil {
					return fmt.Errorf("%v\n%s", err, journal())
				}
			}
			return nil
		})
		t.Logf("every tunnel of both machines served through A %s after A's daemon answered", time.Since(t0).Round(time.Millisecond))
		testutil.Eventually(t, 30*time.Second, "ssh through A after it came back", func() error { return sshVia(opLinkA) })
		testutil.Eventually(t, 30*time.Second, "HTTPS through A after it came back", func() error { return httpsAll(opLinkA) })
	})
}

// joinFromPackage makes h an edge of a's cluster as docs/edges.md has the
// operator do it: the package installed, then, as root, the command a's
// Edges → Add an edge gives. Machines reach h's dashboard at its own
// address, as the socket's drop-in and the env file's TUNNELSVC_BASE_URL
// say (docs/install.md). It checks what the join says and writes, that it
// can run twice, and that the packaged daemon it restarts runs on the
// cluster's PostgreSQL, reading the database URL as a systemd credential.
func joinFromPackage(t *testing.T, a *vps, h *testbed.Host, sshd func(*testbed.Host), certs, caRoot string) *vps {
	t.Helper()
	deb, _, _ := buildPackages(t)
	installDeb(t, h, deb)
	h.Must("mkdir", "-p", "/etc/systemd/system/tunnelsvc.socket.d")
	h.WriteFile("/etc/systemd/system/tunnelsvc.socket.d/listen.conf", []byte("[Socket]\nListenStream=\nListenStream=0.0.0.0:7380\n"), 0o644)
	h.Must("sh", "-c", "echo 'TUNNELSVC_BASE_URL=http://"+edgeBIP+":7380' >>/etc/tunnelsvc/tunnelsvc.env")
	h.Must("systemctl", "daemon-reload")
	h.Must("systemctl", "restart", "tunnelsvc.socket")
	// The cluster's ACME CA, where its settings say; its DNS name; and the
	// first edge's dashboard, https://router.<domain>, over the edges' link.
	h.CopyIn(filepath.Join(certs, "pebble.minica.pem"), edgeACMECA, 0o644)
	h.Must("sh", "-c", "echo '"+pgAddr+" pebble' >>/etc/hosts; echo '"+peerA+" router."+edgeDomain+"' >>/etc/hosts")
	h.WriteFile("/root/pebble-root.pem", []byte(caRoot), 0o644)
	sshd(h)

	tok := a.data("POST", "/api/edges/tokens", `{}`, 200)
	command, _ := tok["command"].(string)
	if want := fmt.Sprintf("tunnelsvc edge join https://router.%s %s", edgeDomain, tok["token"]); command != want {
		t.Fatalf("the command Add an edge gives: %q, want %q", command, want)
	}
	join := func() string {
		t.Helper()
		out, err := h.Exec("sh", "-c", command+" --name edge-b --ca-file /root/pebble-root.pem")
		if err != nil {
			log, _ := h.Exec("journalctl", "--no-pager", "-n", "25", "-u", "tunnelsvc")
			t.Fatalf("%s: %v\n%s\ntunnelsvc's journal:\n%s", command, err, out, log)
		}
		return out
	}
	out := join()
	t.Logf("%s:\n%s", command, out)
	for _, want := range []string{`accepted this VPS as edge "edge-b"`, "sealing key", "TUNNELSVC_EDGE_NAME=edge-b", `serves the cluster as edge "edge-b" (with edge-a)`} {
		if !strings.Contains(out, want) {
			t.Fatalf("the join's output lacks %q:\n%s", want, out)
		}
	}
	if got := h.Must("stat", "-c", "%a %U", "/etc/tunnelsvc/database-url", "/var/lib/tunnelsvc/secret.key"); got != "600 root\n600 root\n" {
		t.Fatalf("the database URL and the sealing key: %q, want 0600 and root's", got)
	}
	if key, keyA := h.Must("cat", "/var/lib/tunnelsvc/secret.key"), a.Must("cat", "/var/lib/tunnelsvc/secret.key"); key != keyA {
		t.Fatal("B's sealing key is not the cluster's")
	}
	if again := join(); !strings.Contains(again, "already in place") || !strings.Contains(again, "already edge-b") {
		t.Fatalf("the join run twice:\n%s", again)
	}

	jar, _ := cookiejar.New(nil)
	v := &vps{Host: h, t: t, client: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true}}}
	testutil.Eventually(t, 60*time.Second, "B's packaged daemon, on PostgreSQL, takes the cluster's password", func() error {
		if r := v.do("POST", "/api/auth/login", `{"password":"`+password+`"}`); r.status != http.StatusOK {
			out, _ := h.Exec("journalctl", "--no-pager", "-n", "20", "-u", "tunnelsvc")
			return fmt.Errorf("login on B: %d %.200s\n%s", r.status, r.raw, out)
		}
		r := v.do("GET", "/api/local/status", "")
		data, _ := r.body["data"].(map[string]any)
		db, _ := data["database"].(map[string]any)
		if db["engine"] != "postgres" || strings.Contains(r.raw, pgPassword) {
			return fmt.Errorf("B's database: %v (status %d)", db, r.status)
		}
		return nil
	})
	if st := h.Must("systemctl", "is-active", "tunnelsvc.service", "tunnelsvc.socket", "tunnelsvc-plugin.socket", "tunnelsvc-gate.socket"); st != strings.Repeat("active\n", 4) {
		t.Fatalf("B's units: %q", st)
	}
	return v
}
