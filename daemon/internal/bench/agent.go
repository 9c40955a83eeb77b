package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
)

// startAgent serves the real agent's handler on the machine's agent port
// (reg.AgentLocalPort, where its agent tunnel leads), over benchMachine:
// the daemon reads its status and delivers configs to it as to a machine.
func startAgent(reg Registration, frpc string) (*http.Server, error) {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", reg.AgentLocalPort))
	if err != nil {
		return nil, fmt.Errorf("the machine's agent port: %w", err)
	}
	srv := &http.Server{Handler: &agent.Server{Token: reg.AgentToken, Unit: "revtunnel-client.service", Version: "bench",
		Sys: benchMachine{frpc: frpc}}, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	return srv, nil
}

// benchMachine is the machine under the agent: its tunnel client is the
// figure's frpc, which the figures start and stop themselves, so a
// delivered config is taken (frpc gets it from the daemon at its next
// start) and a restart asked for is left to them.
type benchMachine struct{ frpc string }

func (benchMachine) UnitState(context.Context) (map[string]string, error) {
	return map[string]string{"ActiveState": "active", "SubState": "running"}, nil
}
func (benchMachine) Restart(context.Context) error             { return nil }
func (benchMachine) ApplyConfig(context.Context, []byte) error { return nil }
func (m benchMachine) ClientVersion(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, m.frpc, "--version").Output()
	return strings.TrimSpace(string(out)), err
}
func (benchMachine) Monotonic() (time.Duration, error) { return time.Minute, nil }
func (benchMachine) Uninstall(context.Context) error   { return nil }
