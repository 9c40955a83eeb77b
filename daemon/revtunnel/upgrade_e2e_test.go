package revtunnel_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
)

// TestPreviousClientAgainstNewServer: frps is the pinned frp; a machine not
// yet updated runs the frpc the bundle carried before (tools/frp-previous,
// built from its tag). Its config asks for nothing the old frpc lacks, and
// its SSH port and a tcp tunnel carry bytes. Once its agent reports the new
// client (and the daemon has heard frps say its own version), its desired
// config asks for frp's wire protocol v2, which the
// old frpc would refuse and the new one speaks: the same ports carry bytes
// again.
func TestPreviousClientAgainstNewServer(t *testing.T) {
	previous := testutil.PreviousFRPC(t)
	e := startEngine(t)
	m := e.register("old")
	var tun struct {
		RemotePort int `json:"remote_port"`
	}
	if code, body := e.c.Call("POST", "/api/tunnels", map[string]any{"machine_id": m.ID, "name": "db", "kind": "tcp", "local_port": e.echoPort}, &tun); code != 201 {
		t.Fatalf("create tunnel: %d %s", code, body)
	}
	config := func() string {
		var conf string
		if code, _ := e.c.Call("GET", fmt.Sprintf("/api/machines/%d/revtunnel-client", m.ID), nil, &conf); code != 200 {
			t.Fatalf("client config: %d %s", code, conf)
		}
		return conf
	}
	carries := func(what string) {
		t.Helper()
		eventually(t, 15*time.Second, what, func() error {
			if err := echo(m.TunnelPort); err != nil {
				return fmt.Errorf("ssh port: %w", err)
			}
			return echo(tun.RemotePort)
		})
	}

	conf := config()
	if strings.Contains(conf, "wireProtocol") {
		t.Fatalf("a machine whose client version is unknown is asked for a wire protocol:\n%s", conf)
	}
	old := e.d.RunFRPCBinary(t, previous, "old", conf, e.echoPort)
	carries("bytes through the previous frpc")
	if got := e.machineByName("old")["status"]; got != "online" {
		t.Fatalf("the machine on the previous frpc is %v", got)
	}

	// The bundle is updated: the agent reports the new frpc.
	version := strings.TrimPrefix(testutil.FRPVersion(t), "v")
	e.d.App.Agents.Report(context.Background(), m.ID, agentclient.Status{Status: agent.Status{ClientVersion: version, AgentVersion: "2.0.0"}, BundleVersion: "2.0.0"})
	// frps (the pinned one) speaks it too, once the daemon has heard it
	// say its version.
	eventually(t, 15*time.Second, "the desired config asks for wire protocol v2", func() error {
		if conf = config(); !strings.Contains(conf, "wireProtocol = 'v2'") {
			return fmt.Errorf("a machine on frpc %s is not asked for wire protocol v2:\n%s", version, conf)
		}
		return nil
	})
	if err := revtunnel.Verify(context.Background(), previous, conf); err == nil {
		t.Fatal("the previous frpc takes a config asking for wire protocol v2: the daemon need not wait for the update to ask")
	}
	old.Stop()
	e.runClient("old", conf)
	carries("bytes through the new frpc on wire protocol v2")
}
