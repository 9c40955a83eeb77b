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
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// startAgent serves the real agent's handler on the machine's agent port
// (reg.AgentLocalPort, where its agent tunnel leads), over a machine whose
// tunnel client is frpc: the daemon reads its status and delivers configs
// to it as to a machine.
func startAgent(reg Registration, frpc string) (*http.Server, error) {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", reg.AgentLocalPort))
	if err != nil {
		return nil, fmt.Errorf("the machine's agent port: %w", err)
	}
	// The figures start and stop frpc themselves: a delivered config is
	// taken (frpc gets it from the daemon at its next start), a restart
	// left to them.
	version := func(ctx context.Context) (string, error) {
		out, err := exec.CommandContext(ctx, frpc, "--version").Output()
		return strings.TrimSpace(string(out)), err
	}
	srv := &http.Server{Handler: &agent.Server{Token: reg.AgentToken, Unit: "revtunnel-client.service", Version: "bench",
		Sys: testutil.IdleMachine{Client: version}}, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	return srv, nil
}
