package systemtest

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testbed"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// oldAgentEnv makes this test binary the agent as installed before signed
// requests, on 127.0.0.1:<its value>, with the token and unit of
// /etc/tunnel-agent/config.env.
const oldAgentEnv = "TUNNELSVC_TEST_OLD_AGENT_PORT"

func serveOldAgent(port string) {
	env := map[string]string{}
	f, err := os.Open("/etc/tunnel-agent/config.env")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		env[k] = v
	}
	f.Close()
	unit := env["TUNNEL_AGENT_UNIT"]
	old := &testutil.OldAgent{Token: env["TUNNEL_AGENT_TOKEN"], Unit: unit,
		Sys: agent.Commands{Unit: unit, FRPC: env["TUNNEL_AGENT_FRPC"], Self: "/usr/local/bin/tunnel-agent"}}
	fmt.Fprintln(os.Stderr, http.ListenAndServe("127.0.0.1:"+port, old))
	os.Exit(1)
}

// oldAgentThroughFrps: the machine's agent is replaced by one as installed
// before signed requests. The daemon (its units over D-Bus) finds the
// agent port held by frps's dynamic user, so it reaches that agent with
// its token, and the machine shows the outdated agent; once the current
// agent is back, a signed exchange clears that.
func oldAgentThroughFrps(t *testing.T, h, m *testbed.Host, v *vps, id int64, journal func() string) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	port := strings.TrimSpace(m.Must("sed", "-n", "s/^TUNNEL_AGENT_PORT=//p", "/etc/tunnel-agent/config.env"))
	m.CopyIn(self, "/usr/local/bin/old-tunnel-agent", 0o755)
	m.Must("systemctl", "stop", "tunnel-agent")
	m.Must("systemd-run", "--unit=old-tunnel-agent", "--collect", "-E", oldAgentEnv+"="+port, "/usr/local/bin/old-tunnel-agent")
	defer func() {
		m.Exec("systemctl", "stop", "old-tunnel-agent")
		m.Must("systemctl", "start", "tunnel-agent")
	}()
	path := fmt.Sprintf("/api/machines/%d/agent/status", id)
	testutil.Eventually(t, 20*time.Second, "status through the old agent", func() error {
		if a := v.do("GET", path, ""); a.status != 200 || !strings.Contains(a.raw, `"active_state":"active"`) {
			return fmt.Errorf("%d %s", a.status, a.raw)
		}
		return nil
	})
	ms := v.machines()
	if len(ms) != 1 || ms[0]["agent_outdated"] != true || !strings.Contains(fmt.Sprint(ms[0]["status_reason"]), "run bootstrap.sh on the machine again") {
		t.Fatalf("machine after the old agent answered: %v\n%s", ms, journal())
	}
	frpsUID := strings.TrimSpace(h.Must("systemctl", "show", "-p", "UID", "--value", "revtunnel-server"))
	t.Logf("revtunnel-server runs as uid %s; the old agent got its token through it", frpsUID)

	m.Must("systemctl", "stop", "old-tunnel-agent")
	m.Must("systemctl", "start", "tunnel-agent")
	testutil.Eventually(t, 20*time.Second, "status through the current agent", func() error {
		if a := v.do("GET", path, ""); a.status != 200 {
			return fmt.Errorf("%d %s", a.status, a.raw)
		}
		return nil
	})
	if ms := v.machines(); len(ms) != 1 || ms[0]["agent_outdated"] != false || ms[0]["status_reason"] != "" {
		t.Fatalf("machine after the current agent answered: %v", ms)
	}
}
