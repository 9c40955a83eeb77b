package agentclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
)

// CapSpeedTest is the capability of agents that take the speed test routes
// (agent/speedtest.go).
const CapSpeedTest = agent.SpeedTestCapability

// streamLink dials machine id's agent and gets a challenge whose answer
// is signed with its agent token: only its agent gets a stream request.
// An agent that predates signed requests takes no speed test either.
func (c *Client) streamLink(ctx context.Context, id int64) (*link, string, error) {
	l, err := c.dial(ctx, id)
	if err != nil {
		return nil, "", err
	}
	status, raw, _, signed, err := l.exchange(ctx, "GET", "/challenge", nil, http.Header{})
	if err == nil && !signed {
		err = l.notAgent(status, raw)
	}
	var ch string
	if err == nil {
		ch, err = challengeOf(status, raw)
	}
	if err != nil {
		l.close()
		return nil, "", err
	}
	return l, ch, nil
}

// stream sends one stream request (path, with its bounds, and body) to
// machine id's agent, signed without its body (agent.StreamSignature),
// and returns the link, the answer and the request's nonce. The caller
// closes the answer's body, then the link.
func (c *Client) stream(ctx context.Context, id int64, path string, seconds int, limit int64, body io.Reader) (*link, *http.Response, string, error) {
	l, ch, err := c.streamLink(ctx, id)
	if err != nil {
		return nil, nil, "", err
	}
	uri := path + "?" + agent.SpeedQuery(seconds, limit)
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+l.addr+uri, body)
	if err != nil {
		l.close()
		return nil, nil, "", err
	}
	nonce := agent.NewNonce()
	req.Header.Set(agent.HeaderChallenge, ch)
	req.Header.Set(agent.HeaderNonce, nonce)
	req.Header.Set(agent.HeaderSignature, agent.StreamSignature(l.acc.Token, "POST", req.URL.RequestURI(), ch, nonce))
	resp, err := l.hc.Do(req)
	if err != nil {
		l.close()
		return nil, nil, "", &UnreachableError{MachineID: id, Err: err}
	}
	return l, resp, nonce, nil
}

// signedAnswer reads a small answer that must be signed for nonce, into
// out (an *AgentError when it is not a success).
func (l *link) signedAnswer(resp *http.Response, nonce string, out any) error {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return &UnreachableError{MachineID: l.id, Err: err}
	}
	if !agent.SignatureOK(resp.Header.Get(agent.HeaderSignature), agent.ResponseSignature(l.acc.Token, nonce, resp.StatusCode, raw)) {
		return l.notAgent(resp.StatusCode, raw)
	}
	return answer(resp.StatusCode, raw, out)
}

// SpeedDownload streams filler to machine id's agent for seconds, or until
// limit bytes went, and returns what the agent measured receiving it.
// moved counts the bytes handed to the connection so far. ctx bounds the
// whole exchange.
func (c *Client) SpeedDownload(ctx context.Context, id int64, seconds int, limit int64, moved *atomic.Int64) (agent.Transfer, error) {
	if moved == nil {
		moved = new(atomic.Int64)
	}
	body := &agent.FillerReader{Budget: time.Duration(seconds) * time.Second, Left: limit, Sent: moved}
	l, resp, nonce, err := c.stream(ctx, id, agent.PathSpeedDownload, seconds, limit, body)
	if err != nil {
		return agent.Transfer{}, err
	}
	defer l.close()
	defer resp.Body.Close()
	var t agent.Transfer
	err = l.signedAnswer(resp, nonce, &t)
	return t, err
}

// SpeedUpload has machine id's agent stream filler for seconds, or until
// limit bytes went, and measures receiving it here. moved counts the
// bytes received so far. The agent signs how much it sent in the answer's
// trailer: a count that differs from what arrived is an error.
func (c *Client) SpeedUpload(ctx context.Context, id int64, seconds int, limit int64, moved *atomic.Int64) (agent.Transfer, error) {
	if moved == nil {
		moved = new(atomic.Int64)
	}
	l, resp, nonce, err := c.stream(ctx, id, agent.PathSpeedUpload, seconds, limit, http.NoBody)
	if err != nil {
		return agent.Transfer{}, err
	}
	defer l.close()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return agent.Transfer{}, l.signedAnswer(resp, nonce, nil)
	}
	// Bounded here too: the agent's own bounds are its word only.
	t, err := agent.Receive(resp.Body, time.Duration(seconds)*time.Second, limit, l.conn, moved.Store)
	if err != nil {
		return agent.Transfer{}, &UnreachableError{MachineID: id, Err: fmt.Errorf("upload: %w", err)}
	}
	if !agent.SignatureOK(resp.Trailer.Get(agent.HeaderSignature), agent.UploadSignature(l.acc.Token, nonce, t.Bytes)) {
		return agent.Transfer{}, &NotAgentError{MachineID: id, Port: l.acc.Port, Status: resp.StatusCode,
			Said: fmt.Sprintf("%d bytes of upload without the agent's signed count", t.Bytes)}
	}
	return t, nil
}

// RoundTrips times n exchanges of GET /challenge, a small answer signed by
// the agent, on one connection through the machine's tunnel, after one
// that is not counted (it sets up the connection on the way).
func (c *Client) RoundTrips(ctx context.Context, id int64, n int) ([]time.Duration, error) {
	l, _, err := c.streamLink(ctx, id)
	if err != nil {
		return nil, err
	}
	defer l.close()
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		status, raw, _, signed, err := l.exchange(ctx, "GET", "/challenge", nil, http.Header{})
		d := time.Since(start)
		if err != nil {
			return out, err
		}
		if !signed {
			return out, l.notAgent(status, raw)
		}
		out = append(out, d)
	}
	return out, nil
}

// PathMTU asks machine id's agent for the path MTU toward host, the
// address its tunnel client dials for this edge.
func (c *Client) PathMTU(ctx context.Context, id int64, host string) (agent.PathMTU, error) {
	body, err := json.Marshal(map[string]string{"host": host})
	if err != nil {
		return agent.PathMTU{}, err
	}
	var p agent.PathMTU
	err = c.do(ctx, id, "POST", agent.PathSpeedMTU, body, &p)
	return p, err
}
