package systemtest

import (
	"fmt"
	"net/http"
	"net/http/cookiejar"
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
	pgPassword   = "edge-test-database"
)

// TestTwoEdges: two edges on one PostgreSQL on its own host, and a machine
// joined through edge A with the one-line bootstrap. Without anyone
// touching the machine it gets a tunnel client for edge B too, and a TCP
// tunnel made on edge B answers through both edges. PostgreSQL stops for
// 60 s: the tunnel keeps answering through both, writes answer 503, and
// both edges write again within 10 s of its return. Edge A is powered
// off: the tunnel still answers through B, the operator logs in on B, and
// a tunnel made on B then reaches the machine.
func TestTwoEdges(t *testing.T) {
	t.Parallel()
	bin := buildDaemon(t)
	static := buildStatic(t)
	frps, _ := testutil.FRP()

	pg := testbed.Boot(t, "pg")
	ea := testbed.Boot(t, "edge-a")
	eb := testbed.Boot(t, "edge-b")
	m := testbed.Boot(t, "machine")
	testbed.JoinNamed(t, m, "eth0", edgeMachineA+"/24", ea, "eth0", edgeAIP+"/24")
	testbed.JoinNamed(t, m, "eth1", edgeMachineB+"/24", eb, "eth0", edgeBIP+"/24")
	testbed.JoinNamed(t, pg, "eth0", pgForA+"/24", ea, "eth1", "10.213.33.1/24")
	testbed.JoinNamed(t, pg, "eth1", pgForB+"/24", eb, "eth1", "10.213.34.1/24")

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

	journal := func() string {
		var b strings.Builder
		for _, h := range []*testbed.Host{ea, eb} {
			out, _ := h.Exec("journalctl", "--no-pager", "-n", "30", "-u", "tunnelsvc-test", "-u", "revtunnel-server")
			fmt.Fprintf(&b, "%s:\n%s\n", h.Name, out)
		}
		out, _ := m.Exec("sh", "-c", "journalctl --no-pager -n 40 -u 'revtunnel-client*' -u tunnel-agent; ls -l /etc/revtunnel")
		return b.String() + "machine:\n" + out
	}
	startEdge := func(h *testbed.Host, name, addr, dbAddr string) *vps {
		t.Helper()
		installServer(t, h, bin, frps, static)
		h.Must("systemd-run", "--unit=tunnelsvc-test", "--collect", "/usr/bin/tunnelsvc", "serve",
			"--listen", "0.0.0.0:7380", "--data-dir", "/var/lib/tunnelsvc", "--base-url", "http://"+addr+":7380",
			"--server-host", addr, "--static-dir", "/usr/lib/tunnelsvc/static", "--bin-dir", "/usr/lib/tunnelsvc",
			"--edge-name", name, "--database", fmt.Sprintf("postgres://postgres:%s@%s:5432/tunnelsvc?sslmode=disable", pgPassword, dbAddr))
		jar, _ := cookiejar.New(nil)
		v := &vps{Host: h, t: t, client: &http.Client{Jar: jar, Timeout: 30 * time.Second,
			Transport: &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true}}}
		testutil.Eventually(t, 30*time.Second, name+" answers", func() error {
			_, err := h.Exec("curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:7380/healthz")
			return err
		})
		return v
	}
	frpsUp := func(v *vps) {
		t.Helper()
		v.data("POST", "/api/local/reconcile", "", 200)
		testutil.Eventually(t, 30*time.Second, v.Name+"'s frps listens", func() error {
			if _, err := v.Exec("sh", "-c", "systemctl is-active revtunnel-server && ss -ltn | grep -q ':7000 '"); err != nil {
				return fmt.Errorf("%v\n%s", err, journal())
			}
			return nil
		})
	}

	a := startEdge(ea, "edge-a", edgeAIP, pgForA)
	a.data("POST", "/api/auth/setup", `{"password":"`+password+`"}`, 200)
	frpsUp(a)
	// Edge B gets the sealing key as `tunnelsvc edge join` brings it.
	key := ea.Must("cat", "/var/lib/tunnelsvc/secret.key")
	eb.WriteFile("/var/lib/tunnelsvc/secret.key", []byte(key), 0o600)
	b := startEdge(eb, "edge-b", edgeBIP, pgForB)
	b.data("POST", "/api/auth/login", `{"password":"`+password+`"}`, 200)
	frpsUp(b)

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
				return fmt.Errorf("the machine's edges: %v", edges)
			}
			return nil
		})
		if cfg := m.Must("cat", "/etc/revtunnel/client-edge-b.toml"); !strings.Contains(cfg, "serverAddr = '"+edgeBIP+"'") {
			t.Fatalf("edge B's client config:\n%s", cfg)
		}
		if cfg := m.Must("cat", "/etc/revtunnel/client.toml"); !strings.Contains(cfg, "serverAddr = '"+edgeAIP+"'") {
			t.Fatalf("the main client config:\n%s", cfg)
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

	t.Run("PostgreSQL stopped for 60 s", func(t *testing.T) {
		pg.Must("systemctl", "stop", "pgtb")
		down := time.Now()
		rounds, writes := 0, 0
		for time.Since(down) < 60*time.Second {
			for _, h := range []*testbed.Host{ea, eb} {
				if err := through(h, port); err != nil {
					t.Fatalf("%s into the outage: %v\n%s", time.Since(down).Round(time.Second), err, journal())
				}
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

	t.Run("edge A powered off", func(t *testing.T) {
		ea.Close()
		if err := through(eb, port); err != nil {
			t.Fatalf("the tunnel through B after A's death: %v\n%s", err, journal())
		}
		jar, _ := cookiejar.New(nil)
		fresh := &vps{Host: eb, t: t, client: &http.Client{Jar: jar, Timeout: 30 * time.Second,
			Transport: &http.Transport{DialContext: eb.DialContext, DisableKeepAlives: true}}}
		fresh.data("POST", "/api/auth/login", `{"password":"`+password+`"}`, 200)
		port2 := tunnel("web-2")
		testutil.Eventually(t, 60*time.Second, "a tunnel made on B after A's death answers through B", func() error {
			if err := through(eb, port2); err != nil {
				return fmt.Errorf("%v\n%s", err, journal())
			}
			return nil
		})
	})
}
