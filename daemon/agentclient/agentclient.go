// Package agentclient is the daemon's side of tunnel-agent: it reaches a
// machine's agent at 127.0.0.1:<agent port> on this server, where frps
// listens for the machine's `agent` tunnel, and signs every request with the
// machine's agent token without sending it (agent/sign.go). Agents that
// predate signed requests get the token as before (Bearer), but only through
// a socket of the tunnel server itself (proveServer).
package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/networds"
)

// Machines is what the client needs from the machines domain.
type Machines interface {
	Agent(ctx context.Context, id int64) (machines.AgentAccess, error)
	ClientConfig(ctx context.Context, id int64, fallbackHost string) (string, error)
	// SetAgentOutdated records whether the machine's agent predates
	// signed requests.
	SetAgentOutdated(ctx context.Context, id int64, outdated bool) error
}

// Client talks to agents.
type Client struct {
	Machines Machines
	// Host is where agent tunnels listen on this server (127.0.0.1).
	Host string
	// ServerHost is the frps address put in pushed configs when the machines
	// domain has none configured (the host of --base-url).
	ServerHost string
	HTTP       *http.Client
	Log        *slog.Logger
	// Rollout, when set, says after a push whether the machine's frpc must
	// restart to pin the tunnel CA.
	Rollout *Rollout
	// ServerUID returns the uid the tunnel server (frps) runs as. An agent
	// that predates signed requests is sent its token only on a connection
	// whose other end is a socket of that uid (see proveServer); nil: such
	// agents get nothing.
	ServerUID func(ctx context.Context) (uint32, error)
	// Report, when set, is given every status an agent answered, so the
	// versions it reports are recorded whoever asked.
	Report func(ctx context.Context, id int64, st Status)
}

// UnreachableError: the agent tunnel did not answer (machine offline, agent
// not installed or stopped).
type UnreachableError struct {
	MachineID int64
	Err       error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("the agent of machine %d is not reachable (machine offline, or tunnel-agent not installed or not running): %s", e.MachineID, networds.Say(e.Err))
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// AgentError is an answer of the agent other than success, in its words.
type AgentError struct {
	Status int
	Msg    string
}

func (e *AgentError) Error() string { return fmt.Sprintf("agent answered %d: %s", e.Status, e.Msg) }

// NotAgentError: what answers on the agent's port did not sign its answer
// with the machine's agent token. Nothing but a challenge request went to it.
type NotAgentError struct {
	MachineID int64
	Port      int
	Status    int
	Said      string
}

func (e *NotAgentError) Error() string {
	return fmt.Sprintf("what answers on the agent port %d of machine %d is not its agent (HTTP %d, %q, not signed with the machine's agent token): "+
		"another program holds the port while the machine is offline",
		e.Port, e.MachineID, e.Status, e.Said)
}

// UnprovenListenerError: what answers on the agent port speaks only the
// protocol of agents that predate signed requests (the token itself, as a
// Bearer header), and the daemon could not prove that the socket it talks
// to is the tunnel server's. It sent nothing but the challenge request.
type UnprovenListenerError struct {
	MachineID int64
	Port      int
	// UID owns the socket that answered and ServerUID is the tunnel
	// server's uid; both are set when Err is nil.
	UID, ServerUID uint32
	// Err says why the check could not be made.
	Err error
}

func (e *UnprovenListenerError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("what answers on the agent port %d of machine %d speaks only the protocol of agents that predate signed requests, "+
			"and the daemon could not check that it is the tunnel server (%v), so it sent it nothing: run bootstrap.sh on the machine again", e.Port, e.MachineID, e.Err)
	}
	return fmt.Sprintf("another program (uid %d) holds the agent port %d of machine %d, not the tunnel server (uid %d); nothing was sent to it. "+
		"The machine's agent tunnel is down (machine offline?); `ss -ltnpe 'sport = :%d'` names the program", e.UID, e.Port, e.MachineID, e.ServerUID, e.Port)
}

func (e *UnprovenListenerError) Unwrap() error { return e.Err }

// legacyRoutes are the requests agents that predate signed requests know.
var legacyRoutes = map[string]bool{"GET /status": true, "POST /restart": true, "PUT /config": true, "POST /uninstall": true}

// isLegacyAnswer: an agent that predates signed requests answers the
// challenge, as any request without its token, with 401 and this header.
func isLegacyAnswer(status int, h http.Header) bool {
	return status == http.StatusUnauthorized && h.Get("WWW-Authenticate") == `Bearer realm="tunnel-agent"`
}

// do makes one signed exchange with the machine's agent (see agent/sign.go):
// GET /challenge, whose answer must be signed with the agent token, then the
// request, signed, on the same connection, whose answer must be signed too.
// The token itself is never sent, except to an agent that predates signed
// requests, and then only once the listener on this very connection is
// proven to be the tunnel server's (see proveServer). c.HTTP's Timeout bounds
// the exchange (default 30 s); its transport is not used: each exchange
// dials its own connection.
func (c *Client) do(ctx context.Context, id int64, method, path string, body []byte, out any) error {
	timeout := 30 * time.Second
	if c.HTTP != nil && c.HTTP.Timeout > 0 {
		timeout = c.HTTP.Timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l, err := c.dial(ctx, id)
	if err != nil {
		return err
	}
	defer l.close()
	status, raw, h, signed, err := l.exchange(ctx, "GET", "/challenge", nil, http.Header{})
	if err != nil {
		return err
	}
	if !signed {
		if !isLegacyAnswer(status, h) || !legacyRoutes[method+" "+path] {
			return l.notAgent(status, raw)
		}
		if err := c.proveServer(ctx, id, l.acc.Port, l.conn); err != nil {
			return err
		}
		c.setOutdated(ctx, id, l.acc, true)
		status, raw, _, _, err = l.exchange(ctx, method, path, body, http.Header{"Authorization": {"Bearer " + l.acc.Token}})
		if err != nil {
			return err
		}
		return answer(status, raw, out)
	}
	ch, err := challengeOf(status, raw)
	if err != nil {
		return err
	}
	status, raw, _, signed, err = l.exchange(ctx, method, path, body, http.Header{agent.HeaderChallenge: {ch}})
	if err != nil {
		return err
	}
	if !signed {
		return l.notAgent(status, raw)
	}
	c.setOutdated(ctx, id, l.acc, false)
	return answer(status, raw, out)
}

// link is one connection to a machine's agent port and the HTTP client
// that sends on it and on nothing else: whoever answered the challenge,
// and whose socket was checked, gets the request.
type link struct {
	id   int64
	acc  machines.AgentAccess
	addr string
	conn net.Conn
	tr   *http.Transport
	hc   *http.Client
}

// dial connects to machine id's agent port on this server.
func (c *Client) dial(ctx context.Context, id int64) (*link, error) {
	acc, err := c.Machines.Agent(ctx, id)
	if err != nil {
		return nil, err
	}
	if acc.Port == 0 {
		return nil, &UnreachableError{MachineID: id, Err: fmt.Errorf("no agent port allocated")}
	}
	host := c.Host
	if host == "" {
		host = "127.0.0.1"
	}
	l := &link{id: id, acc: acc, addr: net.JoinHostPort(host, strconv.Itoa(acc.Port))}
	var d net.Dialer
	if l.conn, err = d.DialContext(ctx, "tcp", l.addr); err != nil {
		return nil, &UnreachableError{MachineID: id, Err: err}
	}
	dialed := false
	l.tr = &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if dialed {
				return nil, fmt.Errorf("the agent closed the connection after the challenge")
			}
			dialed = true
			return l.conn, nil
		},
		MaxConnsPerHost: 1, DisableCompression: true,
	}
	l.hc = &http.Client{Transport: l.tr}
	return l, nil
}

func (l *link) close() {
	l.tr.CloseIdleConnections()
	l.conn.Close()
}

// exchange sends one request; signed says whether the answer was signed
// with the agent token, bound to the request's nonce.
func (l *link) exchange(ctx context.Context, method, path string, body []byte, header http.Header) (status int, raw []byte, h http.Header, signed bool, err error) {
	nonce := agent.NewNonce()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+l.addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, false, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set(agent.HeaderNonce, nonce)
	if ch := header.Get(agent.HeaderChallenge); ch != "" {
		req.Header.Set(agent.HeaderSignature, agent.RequestSignature(l.acc.Token, method, req.URL.RequestURI(), body, ch, nonce))
	}
	resp, err := l.hc.Do(req)
	if err != nil {
		return 0, nil, nil, false, &UnreachableError{MachineID: l.id, Err: err}
	}
	defer resp.Body.Close()
	raw, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, nil, false, &UnreachableError{MachineID: l.id, Err: err}
	}
	signed = agent.SignatureOK(resp.Header.Get(agent.HeaderSignature), agent.ResponseSignature(l.acc.Token, nonce, resp.StatusCode, raw))
	return resp.StatusCode, raw, resp.Header, signed, nil
}

// notAgent: what answered did not sign its answer with the agent token.
func (l *link) notAgent(status int, raw []byte) error {
	return &NotAgentError{MachineID: l.id, Port: l.acc.Port, Status: status, Said: errorText(raw, 200)}
}

// challengeOf reads a signed answer to GET /challenge.
func challengeOf(status int, raw []byte) (string, error) {
	var ch struct {
		Challenge string `json:"challenge"`
	}
	if status != http.StatusOK || json.Unmarshal(raw, &ch) != nil || ch.Challenge == "" {
		return "", &AgentError{Status: status, Msg: "no challenge in the answer: " + errorText(raw, 300)}
	}
	return ch.Challenge, nil
}

// answer turns an agent's answer into out, or an *AgentError.
func answer(status int, raw []byte, out any) error {
	if status/100 != 2 {
		return &AgentError{Status: status, Msg: errorText(raw, 1<<20)}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return &AgentError{Status: status, Msg: "unreadable answer: " + err.Error()}
		}
	}
	return nil
}

// proveServer checks that the other end of conn, which answered like an
// agent that predates signed requests, is a socket of the tunnel server:
// only frps's own listener on the agent port forwards to the machine's
// agent. Anything else gets nothing, least of all the token.
func (c *Client) proveServer(ctx context.Context, id int64, port int, conn net.Conn) error {
	fail := func(err error) error { return &UnprovenListenerError{MachineID: id, Port: port, Err: err} }
	if c.ServerUID == nil {
		return fail(errors.New("this daemon does not know the uid the tunnel server runs as"))
	}
	server, err := c.ServerUID(ctx)
	if err != nil {
		return fail(fmt.Errorf("the uid the tunnel server runs as: %w", err))
	}
	peer, err := PeerUID(conn)
	if err != nil {
		return fail(err)
	}
	if peer != server {
		return &UnprovenListenerError{MachineID: id, Port: port, UID: peer, ServerUID: server}
	}
	return nil
}

// setOutdated records whether the machine's agent predates signed requests,
// when that changed; a failure to record is logged only.
func (c *Client) setOutdated(ctx context.Context, id int64, acc machines.AgentAccess, outdated bool) {
	if acc.Outdated == outdated {
		return
	}
	if err := c.Machines.SetAgentOutdated(ctx, id, outdated); err != nil {
		c.log().Warn("recording whether the machine's agent predates signed requests failed", "machine_id", id, "err", err)
	}
}

func (c *Client) log() *slog.Logger {
	if c.Log == nil {
		return slog.Default()
	}
	return c.Log
}

// errorText is the "error" of a JSON answer, else the answer's start.
func errorText(raw []byte, max int) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		return e.Error
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) > max {
		raw = raw[:max]
	}
	return string(raw)
}

// Status is the agent's GET /status: what every agent reports, and what
// agents that can update themselves add (absent from older agents). The
// additions are decoded here by their JSON names, so the daemon reads them
// from any agent that sends them, whatever agent package it was built from.
type Status struct {
	agent.Status
	// Capabilities are what the agent can do beyond the basics; "update"
	// means it takes POST /update.
	Capabilities []string `json:"capabilities,omitempty"`
	// Arch is the machine's GOARCH.
	Arch string `json:"arch,omitempty"`
	// BundleVersion is the machine bundle installed (the agent's own
	// version on a machine bootstrapped before bundles).
	BundleVersion string `json:"bundle_version,omitempty"`
	// Update is the machine's last update; nil when none ever ran.
	Update *UpdateState `json:"update,omitempty"`
}

// CapUpdate is the capability of agents that take POST /update.
const CapUpdate = "update"

// Can says whether the agent reports capability c.
func (s Status) Can(c string) bool {
	for _, have := range s.Capabilities {
		if have == c {
			return true
		}
	}
	return false
}

// UpdateState is an agent's account of the machine's last update.
type UpdateState struct {
	// State: downloading, applying, failed, rolled_back or current.
	State   string `json:"state"`
	Version string `json:"version"`
	Error   string `json:"error,omitempty"`
	// At is RFC 3339, kept as text: a machine's odd clock or format must
	// not make the whole status unreadable.
	At string `json:"at,omitempty"`
}

// Status is the agent's GET /status, for the API.
func (c *Client) Status(ctx context.Context, id int64) (any, error) {
	st, err := c.AgentStatus(ctx, id)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// AgentStatus is the agent's GET /status; it is also handed to Report.
func (c *Client) AgentStatus(ctx context.Context, id int64) (Status, error) {
	var st Status
	if err := c.do(ctx, id, "GET", "/status", nil, &st); err != nil {
		return Status{}, err
	}
	if c.Report != nil {
		c.Report(ctx, id, st)
	}
	return st, nil
}

// AgentCapabilities is what the agent says it takes (GET /status).
func (c *Client) AgentCapabilities(ctx context.Context, id int64) ([]string, error) {
	st, err := c.AgentStatus(ctx, id)
	return st.Capabilities, err
}

// Manifest is what POST /update tells the agent to fetch and check.
type Manifest struct {
	Version string `json:"version"`
	URL     string `json:"url"`
	SHA256  string `json:"sha256"`
	Size    int64  `json:"size"`
}

// Update asks the agent to download, check and apply the bundle m
// describes. It answers once the download started; the outcome shows in
// its status.
func (c *Client) Update(ctx context.Context, id int64, m Manifest) (string, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return c.message(ctx, id, "POST", "/update", body)
}

// ConfirmUpdate tells the agent, now running version, that the daemon
// heard from it: it disarms the rollback.
func (c *Client) ConfirmUpdate(ctx context.Context, id int64, version string) (string, error) {
	body, err := json.Marshal(map[string]string{"version": version})
	if err != nil {
		return "", err
	}
	return c.message(ctx, id, "POST", "/update/confirm", body)
}

func (c *Client) message(ctx context.Context, id int64, method, path string, body []byte) (string, error) {
	var m struct {
		Message string `json:"message"`
	}
	if err := c.do(ctx, id, method, path, body, &m); err != nil {
		return "", err
	}
	return m.Message, nil
}

// RestartTunnel restarts the machine's tunnel client. The agent answers
// before it restarts (the answer travels through that client).
func (c *Client) RestartTunnel(ctx context.Context, id int64) (string, error) {
	var m struct {
		Message string `json:"message"`
	}
	if err := c.do(ctx, id, "POST", "/restart", nil, &m); err != nil {
		return "", err
	}
	return m.Message, nil
}

// PutConfig installs config, which carries its generation line
// (agent.WithGeneration), through the machine's agent, and returns the
// generation the agent reports applied. An agent too old to report one
// answered success for this very config: gen is then what it applied.
func (c *Client) PutConfig(ctx context.Context, id int64, config string, gen int64) (int64, error) {
	var ans agent.ConfigAnswer
	if err := c.do(ctx, id, "PUT", "/config", []byte(config), &ans); err != nil {
		return 0, err
	}
	if ans.Generation == 0 {
		return gen, nil
	}
	return ans.Generation, nil
}

// ErrOneClient: the machine's agent predates edges and runs one tunnel
// client only.
var ErrOneClient = errors.New("the machine's agent runs one tunnel client only (it predates edges); update the machine")

// PutClients sends a machine its whole set of tunnel clients, one per edge
// (see agent.ClientSet), and returns the generation it applied.
func (c *Client) PutClients(ctx context.Context, id int64, set agent.ClientSet) (int64, error) {
	body, err := json.Marshal(set)
	if err != nil {
		return 0, err
	}
	var ans agent.ConfigAnswer
	if err := c.do(ctx, id, "PUT", "/clients", body, &ans); err != nil {
		var refused *AgentError
		if errors.As(err, &refused) && refused.Status == http.StatusNotFound {
			return 0, ErrOneClient
		}
		return 0, err
	}
	if ans.Generation == 0 {
		return set.Generation, nil
	}
	return ans.Generation, nil
}

// Words says in words why a delivery to a machine's agent failed.
func Words(err error) string {
	var unreachable *UnreachableError
	var refused *AgentError
	var notAgent *NotAgentError
	switch {
	case errors.As(err, &unreachable):
		return "the machine's agent does not answer (the machine is offline, or tunnel-agent is stopped or not installed)"
	case errors.As(err, &notAgent):
		return fmt.Sprintf("another program answers on the machine's agent port %d, not its agent; nothing was sent to it", notAgent.Port)
	case errors.As(err, &refused) && refused.Status == 400:
		return "the machine refused the config: " + refused.Msg
	case errors.As(err, &refused):
		return fmt.Sprintf("the machine's agent failed (HTTP %d): %s", refused.Status, refused.Msg)
	}
	return networds.Say(err)
}
