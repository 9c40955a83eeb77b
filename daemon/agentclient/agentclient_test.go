package agentclient_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
)

const token = "Zm9yLXRlc3RzLW9ubHktYWdlbnQtdG9rZW4tb2YtbTc"

type fakeMachines struct{ port int }

func (f fakeMachines) Agent(context.Context, int64) (machines.AgentAccess, error) {
	return machines.AgentAccess{Port: f.port, Token: token}, nil
}

func (f fakeMachines) SetAgentOutdated(context.Context, int64, bool) error { return nil }

func (f fakeMachines) ClientConfig(context.Context, int64, string) (string, error) {
	return "serverAddr = '127.0.0.1'\n", nil
}

// machineSys is the machine as the agent sees it; it records what the
// agent was asked to do.
type machineSys struct {
	mu    sync.Mutex
	calls []string
}

func (m *machineSys) did(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, s)
}

func (m *machineSys) Calls() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.calls, ",")
}

func (m *machineSys) UnitState(context.Context) (map[string]string, error) {
	m.did("state")
	return map[string]string{"ActiveState": "active", "SubState": "running"}, nil
}
func (m *machineSys) Restart(context.Context) error { m.did("restart"); return nil }
func (m *machineSys) ApplyConfig(_ context.Context, c []byte) error {
	m.did("apply " + strings.TrimSpace(string(c)))
	return nil
}
func (m *machineSys) ClientVersion(context.Context) (string, error) { return "0.65.0", nil }
func (m *machineSys) Monotonic() (time.Duration, error)             { return time.Minute, nil }
func (m *machineSys) Uninstall(context.Context) error               { m.did("uninstall"); return nil }

// realAgent serves the agent's handler on a loopback port.
func realAgent(t *testing.T) (*machineSys, string) {
	sys := &machineSys{}
	srv := httptest.NewServer(&agent.Server{Token: token, Unit: "revtunnel-client.service", Sys: sys, Later: func(f func()) { f() }})
	t.Cleanup(srv.Close)
	return sys, srv.Listener.Addr().String()
}

func client(port int) *agentclient.Client {
	return &agentclient.Client{Machines: fakeMachines{port: port}, Host: "127.0.0.1", HTTP: &http.Client{Timeout: 10 * time.Second}}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, _ := net.SplitHostPort(addr)
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestClientAndAgent: the daemon's client drives a real agent handler.
func TestClientAndAgent(t *testing.T) {
	sys, addr := realAgent(t)
	c := client(portOf(t, addr))
	ctx := context.Background()
	st, err := c.Status(ctx, 7)
	if err != nil || st.(agentclient.Status).ActiveState != "active" {
		t.Fatalf("status: %v %v", st, err)
	}
	if msg, err := c.RestartTunnel(ctx, 7); err != nil || !strings.Contains(msg, "restart started") {
		t.Fatalf("restart: %q %v", msg, err)
	}
	if gen, err := c.PutConfig(ctx, 7, agent.WithGeneration("serverAddr = '127.0.0.1'", 5), 5); err != nil || gen != 5 {
		t.Fatalf("put config: generation %d, %v", gen, err)
	}
	if got := sys.Calls(); got != "state,restart,apply # tunnelsvc config generation: 5\nserverAddr = '127.0.0.1'" {
		t.Fatalf("the machine did %q", got)
	}
	// The agent now reports what it applied.
	st, err = c.Status(ctx, 7)
	if err != nil || st.(agentclient.Status).ConfigGeneration != 5 {
		t.Fatalf("status after the config: %+v %v", st, err)
	}
}

// squatter listens where the agent tunnel should be, records every byte the
// daemon sends, and answers each request with answer (or, when relay is
// set, passes the bytes on to relay and its answers back).
type squatter struct {
	ln    net.Listener
	mu    sync.Mutex
	got   bytes.Buffer
	back  bytes.Buffer
	done  chan struct{}
	relay string
}

func squat(t *testing.T, relay string) *squatter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &squatter{ln: ln, relay: relay, done: make(chan struct{})}
	t.Cleanup(func() { ln.Close() })
	go s.serve()
	return s
}

func (s *squatter) serve() {
	defer close(s.done)
	conn, err := s.ln.Accept()
	if err != nil {
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if s.relay == "" {
		// Answer like an agent would, without the token to sign with.
		r := bufio.NewReader(io.TeeReader(conn, &s.got))
		for {
			req, err := http.ReadRequest(r)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			body := `{"challenge":"0.0.0"}`
			if req.URL.Path != "/challenge" {
				body = `{"active_state":"active"}`
			}
			io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		}
	}
	up, err := net.Dial("tcp", s.relay)
	if err != nil {
		return
	}
	defer up.Close()
	go io.Copy(io.MultiWriter(conn, &lockedBuffer{&s.mu, &s.back}), up)
	io.Copy(up, io.TeeReader(conn, &lockedBuffer{&s.mu, &s.got}))
}

func (s *squatter) sent() []byte {
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.got.Bytes()...)
}

type lockedBuffer struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// replay sends raw bytes to the agent on a new connection and returns the
// status of each answer.
func replay(t *testing.T, addr string, raw []byte) []int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(raw); err != nil {
		t.Fatal(err)
	}
	var codes []int
	r := bufio.NewReader(conn)
	for range strings.Count(string(raw), " HTTP/1.1\r\n") {
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("reading answer %d to the replay: %v", len(codes)+1, err)
		}
		io.Copy(io.Discard, resp.Body)
		codes = append(codes, resp.StatusCode)
	}
	return codes
}

// TestSquatterGetsNoToken: while the machine is offline, a local user of
// the server can listen on the machine's agent port. What the daemon sends
// there carries no token, nothing of it makes the real agent act, and the
// daemon says that what answered is not the agent.
func TestSquatterGetsNoToken(t *testing.T) {
	sys, agentAddr := realAgent(t)
	s := squat(t, "")
	c := client(portOf(t, s.ln.Addr().String()))
	_, err := c.Status(context.Background(), 7)
	var ne *agentclient.NotAgentError
	if !errors.As(err, &ne) || !strings.Contains(err.Error(), "is not its agent") {
		t.Fatalf("status through a squatter: %v, want NotAgentError", err)
	}
	s.ln.Close()
	sent := s.sent()
	if !bytes.Contains(sent, []byte("GET /challenge")) {
		t.Fatalf("the squatter saw no request at all:\n%s", sent)
	}
	if bytes.Contains(sent, []byte(token)) {
		t.Fatalf("the agent token reached the squatter:\n%s", sent)
	}
	if bytes.Contains(sent, []byte("/status")) {
		t.Fatalf("the request itself went to an unproven listener:\n%s", sent)
	}
	codes := replay(t, agentAddr, sent)
	if got := sys.Calls(); got != "" {
		t.Fatalf("replaying what the squatter got made the agent act: %q (answers %v)", got, codes)
	}
}

// TestRelayCannotReplay: a squatter that relays to the real agent (the
// machine came back while it held the port) sees the signed request pass,
// once. Played again to the agent, it is refused with 401.
func TestRelayCannotReplay(t *testing.T) {
	sys, agentAddr := realAgent(t)
	s := squat(t, agentAddr)
	c := client(portOf(t, s.ln.Addr().String()))
	if msg, err := c.RestartTunnel(context.Background(), 7); err != nil || !strings.Contains(msg, "restart started") {
		t.Fatalf("restart through a relay: %q %v", msg, err)
	}
	s.ln.Close()
	sent := s.sent()
	if bytes.Contains(sent, []byte(token)) || bytes.Contains(s.back.Bytes(), []byte(token)) {
		t.Fatalf("the agent token crossed the wire:\n%s\n%s", sent, s.back.Bytes())
	}
	if !bytes.Contains(sent, []byte("POST /restart")) {
		t.Fatalf("recorded no restart:\n%s", sent)
	}
	codes := replay(t, agentAddr, sent)
	if len(codes) != 2 || codes[0] != 200 || codes[1] != 401 {
		t.Fatalf("replayed challenge and restart answered %v, want [200 401]", codes)
	}
	if got := sys.Calls(); got != "restart" {
		t.Fatalf("the machine did %q, want one restart", got)
	}
}

// TestUpdateRoutes: the status fields of agents that can update are read,
// handed to Report, and the update and its confirmation go through signed.
func TestUpdateRoutes(t *testing.T) {
	a := testutil.NewUpdatingAgent(token, "1.0.0")
	a.Arch = "arm64"
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	c := client(portOf(t, srv.Listener.Addr().String()))
	var reported []agentclient.Status
	c.Report = func(_ context.Context, id int64, st agentclient.Status) { reported = append(reported, st) }
	ctx := context.Background()
	st, err := c.AgentStatus(ctx, 7)
	if err != nil || !st.Can(agentclient.CapUpdate) || st.Arch != "arm64" || st.BundleVersion != "1.0.0" || st.AgentVersion != "1.0.0" || st.Update != nil || st.ActiveState != "active" {
		t.Fatalf("status: %+v %v", st, err)
	}
	if len(reported) != 1 || reported[0].Arch != "arm64" {
		t.Fatalf("reported: %+v", reported)
	}
	man := agentclient.Manifest{Version: "1.1.0", URL: "http://server/static/bundles/machine-linux-arm64.tar.gz", SHA256: strings.Repeat("a", 64), Size: 10}
	if msg, err := c.Update(ctx, 7, man); err != nil || msg == "" {
		t.Fatalf("update: %q %v", msg, err)
	}
	st, _ = c.AgentStatus(ctx, 7)
	if st.AgentVersion != "1.1.0" || st.Update == nil || st.Update.Version != "1.1.0" {
		t.Fatalf("after the update: %+v %+v", st, st.Update)
	}
	if _, err := c.ConfirmUpdate(ctx, 7, "9.9.9"); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("confirming another version: %v", err)
	}
	if _, err := c.ConfirmUpdate(ctx, 7, "1.1.0"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(a.Calls(), ","); got != "update 1.1.0,confirm 1.1.0" {
		t.Fatalf("the agent took %q", got)
	}
	if _, err := c.Update(ctx, 7, agentclient.Manifest{Version: "x"}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("an incomplete manifest: %v", err)
	}
}
