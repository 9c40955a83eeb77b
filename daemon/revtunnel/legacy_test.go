package revtunnel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
)

// TestRolloutReachesOldAgent: a machine installed before signed requests
// (an old agent, a config without the tunnel CA) logs in to the real frps.
// The daemon finds that the agent port's listener is frps's own socket,
// pushes the config with the token as the old agent expects, restarts its
// frpc onto the CA, and shows the machine with an outdated agent and what
// to do about it.
func TestRolloutReachesOldAgent(t *testing.T) {
	var old *testutil.OldAgent
	r := newRolloutRig(t, func(token string, sys agent.System, _ *slog.Logger) http.Handler {
		old = &testutil.OldAgent{Token: token, Unit: "revtunnel-client.service", Sys: sys}
		return old
	})
	r.sys.start()
	r.waitPinned()
	// First what it takes (the daemon has not heard from it yet): not a
	// set of clients, so the config alone.
	if got := old.Seen(); got != "GET /status,PUT /config,POST /restart" {
		t.Fatalf("the old agent was asked %q, want its status, then the config push and the restart", got)
	}
	m, err := r.svc.Machine(context.Background(), r.reg.MachineID, "")
	if err != nil {
		t.Fatal(err)
	}
	if !m.AgentOutdated || !strings.Contains(m.StatusReason, "tunnel-agent is outdated") ||
		!strings.Contains(m.StatusReason, "run bootstrap.sh on the machine again") {
		t.Fatalf("machine shows agent_outdated %v, status reason %q", m.AgentOutdated, m.StatusReason)
	}
	st, err := r.client.Status(context.Background(), r.reg.MachineID)
	if err != nil || st.(agentclient.Status).ActiveState != "active" {
		t.Fatalf("status through the old agent: %+v, %v", st, err)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// squatterEnv makes the test binary a squatter (see TestMain).
const squatterEnv = "REVTUNNEL_TEST_SQUATTER_PORT"

// squat is a squatter's whole life: it listens on 127.0.0.1:<port> and
// answers like an agent that predates signed requests, so that a client
// willing to send the token would send it, and writes every byte it
// receives to stdout.
func squat(port string) {
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var mu sync.Mutex
	record := func(b []byte) {
		mu.Lock()
		defer mu.Unlock()
		os.Stdout.Write(b)
	}
	http.Serve(teeListener{ln, record}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			writeJSON(w, http.StatusOK, map[string]string{"message": "thanks"})
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="tunnel-agent"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "agent token required (Authorization: Bearer <token>)"})
	}))
}

type teeListener struct {
	net.Listener
	record func([]byte)
}

func (l teeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return teeConn{c, l.record}, nil
}

type teeConn struct {
	net.Conn
	record func([]byte)
}

func (c teeConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.record(b[:n])
	}
	return n, err
}

// startSquatter runs this test binary as uid and gid 65534 (nobody),
// squatting on 127.0.0.1:port. The returned stop ends the squatter and
// returns every byte it received.
//
// The squatter writes what it reads before it answers, but into a pipe that
// a goroutine of os/exec copies into this process: when a client call
// returns, its bytes can still be in the pipe, and a record read while the
// squatter ran once held one challenge request of two. stop kills the
// squatter and waits for it; cmd.Wait returns only once the copy has read
// the pipe to its end, so the record is complete: the absence of a leak
// too, which polling until the expected count shows up could not prove.
func startSquatter(t *testing.T, port int) (stop func() []byte) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the squatter runs as another user (uid 65534, nobody)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy nobody can run: the test binary's own directory is root's.
	dir, err := os.MkdirTemp("", "squatter-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "squatter")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := &testutil.SyncBuffer{}
	var stderr bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", squatterEnv, port))
	cmd.Stdout, cmd.Stderr = out, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	// Bounds the wait for the output copy should anything else hold the pipe.
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() []byte {
		once.Do(func() {
			cmd.Process.Kill()
			if err := cmd.Wait(); errors.Is(err, exec.ErrWaitDelay) {
				t.Errorf("the squatter's output was still open %v after it was killed", cmd.WaitDelay)
			}
		})
		return []byte(out.String())
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("squatter stderr:\n%s", stderr.String())
		}
	})
	testutil.WaitListening(t, port, 10*time.Second)
	return stop
}

// TestSquatterOnOldAgentPortGetsNoToken: while a machine whose agent
// predates signed requests is offline, a local user of the server (another
// uid) listens on its agent port and answers like that agent. The daemon
// sees that the socket is not frps's and sends it no token: neither a status
// request nor the config delivery reach it, and the machine says which uid holds
// its port.
func TestSquatterOnOldAgentPortGetsNoToken(t *testing.T) {
	var old *testutil.OldAgent
	r := newRolloutRig(t, func(token string, sys agent.System, _ *slog.Logger) http.Handler {
		old = &testutil.OldAgent{Token: token, Unit: "revtunnel-client.service", Sys: sys}
		return old
	})
	ctx := context.Background()
	id := r.reg.MachineID
	acc, err := r.svc.Agent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// The machine is offline: its frpc does not run, frps holds no agent port.
	stopSquatter := startSquatter(t, acc.Port)

	_, err = r.client.Status(ctx, id)
	var ue *agentclient.UnprovenListenerError
	want := fmt.Sprintf("another program (uid 65534) holds the agent port %d of machine %d", acc.Port, id)
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), want) {
		t.Fatalf("status through the squatter: %v, want %q", err, want)
	}
	// The rollout asks the reconciler for a delivery; it fails (and is
	// retried with backoff), and the machine says why.
	r.rollout.Push(id)
	var m machines.Machine
	testutil.Eventually(t, 20*time.Second, "the failed delivery shows on the machine", func() error {
		if m, err = r.svc.Machine(ctx, id, ""); err != nil {
			return err
		}
		if !strings.Contains(m.StatusReason, "config not delivered: "+want) {
			return fmt.Errorf("machine's status reason %q, want %q", m.StatusReason, want)
		}
		return nil
	})
	if m.AgentOutdated {
		t.Fatalf("the squatter's answer marked the machine's agent outdated")
	}

	// The status request and a delivery have returned (the failure is
	// recorded after it): all the squatter received for them, it has. The
	// reconciler may have retried since, which only adds challenges.
	sent := stopSquatter()
	if n := bytes.Count(sent, []byte("GET /challenge ")); n < 2 {
		t.Fatalf("the squatter saw %d challenge requests, want at least 2 (status, delivery):\n%s", n, sent)
	}
	for _, leak := range []string{r.reg.AgentToken, "Authorization", "/status", "/config"} {
		if bytes.Contains(sent, []byte(leak)) {
			t.Fatalf("the squatter received %q:\n%s", leak, sent)
		}
	}
	if got := old.Seen(); got != "" {
		t.Fatalf("the machine's agent was reached: %q", got)
	}
}
