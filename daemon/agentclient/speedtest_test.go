package agentclient_test

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// The speed test's exchanges with a real agent handler: a download and an
// upload, each within its bounds and measured where it arrives; timed
// round trips; the path MTU toward an address.
func TestSpeedTestExchanges(t *testing.T) {
	_, addr := realAgent(t)
	c := client(portOf(t, addr))
	ctx := context.Background()
	st, err := c.AgentStatus(ctx, 7)
	if err != nil || !st.Can(agentclient.CapSpeedTest) {
		t.Fatalf("status: %+v %v", st.Capabilities, err)
	}

	var moved atomic.Int64
	d, err := c.SpeedDownload(ctx, 7, 1, 32<<20, &moved)
	if err != nil || d.Bytes != 32<<20 || moved.Load() != 32<<20 || d.Mbps() <= 0 {
		t.Fatalf("download of 32 MB: %+v (moved %d) %v", d, moved.Load(), err)
	}
	start := time.Now()
	u, err := c.SpeedUpload(ctx, 7, 1, agent.MaxSpeedBytes, &moved)
	if err != nil || u.Bytes == 0 || moved.Load() != u.Bytes || u.Mbps() <= 0 {
		t.Fatalf("upload for a second: %+v %v", u, err)
	}
	// Whichever bound comes first: 256 MB (loopback is fast) or a second.
	if took := time.Since(start); (u.Bytes < agent.MaxSpeedBytes && took < time.Second) || took > 4*time.Second {
		t.Fatalf("an upload bounded by a second and %d bytes moved %d bytes in %s", agent.MaxSpeedBytes, u.Bytes, took)
	}

	rtts, err := c.RoundTrips(ctx, 7, 5)
	if err != nil || len(rtts) != 5 {
		t.Fatalf("round trips: %v %v", rtts, err)
	}
	p, err := c.PathMTU(ctx, 7, "127.0.0.1")
	if err != nil || p.MTU < 1280 || p.Payload != p.MTU-28 {
		t.Fatalf("path MTU: %+v %v", p, err)
	}
}

// An agent that predates signed requests, or something else on the port,
// gets no stream request, and the token never crosses the wire.
func TestSpeedTestOnlyToTheAgent(t *testing.T) {
	old := httptest.NewServer(&testutil.OldAgent{Token: token, Unit: "revtunnel-client.service", Sys: &machineSys{}})
	t.Cleanup(old.Close)
	var ne *agentclient.NotAgentError
	if _, err := client(portOf(t, old.Listener.Addr().String())).SpeedDownload(context.Background(), 7, 1, 1<<20, nil); !errors.As(err, &ne) {
		t.Fatalf("download to an old agent: %v, want NotAgentError", err)
	}
	s := squat(t, "")
	_, err := client(portOf(t, s.ln.Addr().String())).SpeedUpload(context.Background(), 7, 1, 1<<20, nil)
	if !errors.As(err, &ne) {
		t.Fatalf("upload through a squatter: %v, want NotAgentError", err)
	}
	s.ln.Close()
	sent := s.sent()
	if bytes.Contains(sent, []byte(token)) || strings.Contains(string(sent), "/speedtest/") {
		t.Fatalf("the squatter got more than a challenge request:\n%s", sent)
	}
}
