// Package agentclient is the daemon's side of tunnel-agent: it reaches a
// machine's agent at 127.0.0.1:<agent port> on this server, where frps
// listens for the machine's `agent` tunnel, with the machine's agent token.
package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
)

// Machines is what the client needs from the machines domain.
type Machines interface {
	Agent(ctx context.Context, id int64) (machines.AgentAccess, error)
	ClientConfig(ctx context.Context, id int64, fallbackHost string) (string, error)
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
}

// UnreachableError: the agent tunnel did not answer (machine offline, agent
// not installed or stopped).
type UnreachableError struct {
	MachineID int64
	Err       error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("the agent of machine %d is not reachable (machine offline, or tunnel-agent not installed or not running): %v", e.MachineID, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// AgentError is an answer of the agent other than success, in its words.
type AgentError struct {
	Status int
	Msg    string
}

func (e *AgentError) Error() string { return fmt.Sprintf("agent answered %d: %s", e.Status, e.Msg) }

func (c *Client) do(ctx context.Context, id int64, method, path string, body []byte, out any) error {
	acc, err := c.Machines.Agent(ctx, id)
	if err != nil {
		return err
	}
	if acc.Port == 0 {
		return &UnreachableError{MachineID: id, Err: fmt.Errorf("no agent port allocated")}
	}
	host := c.Host
	if host == "" {
		host = "127.0.0.1"
	}
	url := "http://" + net.JoinHostPort(host, strconv.Itoa(acc.Port)) + path
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+acc.Token)
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return &UnreachableError{MachineID: id, Err: err}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(raw, &e) != nil || e.Error == "" {
			e.Error = string(bytes.TrimSpace(raw))
		}
		return &AgentError{Status: resp.StatusCode, Msg: e.Error}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return &AgentError{Status: resp.StatusCode, Msg: "unreadable answer: " + err.Error()}
		}
	}
	return nil
}

// Status is the agent's GET /status.
func (c *Client) Status(ctx context.Context, id int64) (any, error) {
	var st agent.Status
	if err := c.do(ctx, id, "GET", "/status", nil, &st); err != nil {
		return nil, err
	}
	return st, nil
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

// PushConfig renders the machine's current client config and installs it
// through the agent.
func (c *Client) PushConfig(ctx context.Context, id int64) error {
	cfg, err := c.Machines.ClientConfig(ctx, id, c.ServerHost)
	if err != nil {
		return fmt.Errorf("render the client config: %w", err)
	}
	if err := c.do(ctx, id, "PUT", "/config", []byte(cfg), nil); err != nil {
		return err
	}
	if c.Rollout != nil && c.Rollout.NeedsRestart(ctx, id) {
		// frpc reload does not apply TLS settings: restart it onto the pin.
		if _, err := c.RestartTunnel(ctx, id); err != nil {
			return fmt.Errorf("config installed, but restarting the tunnel client to pin the tunnel CA failed: %w", err)
		}
	}
	return nil
}
