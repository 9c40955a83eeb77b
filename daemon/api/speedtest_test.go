package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/speedtest"
)

type speedTestView struct {
	ID           int64    `json:"id"`
	State        string   `json:"state"`
	Phase        string   `json:"phase"`
	Progress     int      `json:"progress"`
	Seconds      int      `json:"seconds"`
	DownloadMbps *float64 `json:"download_mbps"`
	UploadMbps   *float64 `json:"upload_mbps"`
	RTTMillis    *float64 `json:"rtt_ms"`
	MTU          *int     `json:"mtu"`
	Payload      *int     `json:"payload"`
	Error        string   `json:"error"`
}

// errorOf sends a request that must fail with want and returns its error.
func (d *wiredDaemon) errorOf(method, path, body string, want int) string {
	d.t.Helper()
	return string(d.send(method, path, body, want))
}

// oldAgents answers as an agent that predates speed tests.
type oldAgents struct{ speedtest.Agents }

func (o oldAgents) AgentStatus(ctx context.Context, id int64) (agentclient.Status, error) {
	st, err := o.Agents.AgentStatus(ctx, id)
	st.Capabilities = []string{"update"}
	return st, err
}

// A speed test through the API, against the machine's real agent on
// loopback (where frps would forward its agent tunnel): 202 with the test
// running, 409 for a second one, the history with the result; the
// refusals in words; the audit row.
func TestSpeedTestAPI(t *testing.T) {
	d := newWiredDaemonWith(t, func(c *config.Config) { c.ServerHost = "127.0.0.1" })
	d.call("POST", "/api/auth/setup", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	id, _ := d.join("nas")
	path := fmt.Sprintf("/api/machines/%d/speedtest", id)
	// Its tunnel client has not connected yet.
	if msg := d.errorOf("POST", path, `{}`, 409); !strings.Contains(msg, `machine \"nas\" is not connected (never connected): a speed test runs through its tunnel`) {
		t.Fatalf("a machine not connected: %s", msg)
	}
	// frps told the daemon it connected.
	if err := d.a.Store.SetMachineStatus(context.Background(), id, "online", time.Now()); err != nil {
		t.Fatal(err)
	}

	if msg := d.errorOf("POST", path, `{"seconds":2,"schedule":"daily"}`, 400); !strings.Contains(msg, `unknown field \"schedule\"`) {
		t.Fatalf("an unknown field: %s", msg)
	}
	if msg := d.errorOf("POST", path, `{"seconds":11}`, 400); !strings.Contains(msg, "seconds must be 1 to 10") {
		t.Fatalf("11 seconds: %s", msg)
	}
	d.errorOf("POST", "/api/machines/999/speedtest", `{}`, 404)
	d.errorOf("GET", "/api/machines/999/speedtests", "", 404)

	var run speedTestView
	d.call("POST", path, `{"seconds":1}`, http.StatusAccepted, &run)
	if run.State != "running" || run.Phase != "download" || run.Seconds != 1 || run.Progress > 45 {
		t.Fatalf("started: %+v", run)
	}
	if msg := d.errorOf("POST", path, ``, 409); !strings.Contains(msg, `a speed test of machine \"nas\" is running`) {
		t.Fatalf("a second test: %s", msg)
	}
	var done speedTestView
	testutil.Eventually(t, 30*time.Second, "the test ends", func() error {
		var ts []speedTestView
		d.call("GET", path+"s", "", http.StatusOK, &ts)
		if len(ts) != 1 || ts[0].ID != run.ID {
			return fmt.Errorf("history %+v", ts)
		}
		if done = ts[0]; done.State == "running" {
			return fmt.Errorf("%s at %d %%", done.Phase, done.Progress)
		}
		return nil
	})
	if done.State != "done" || done.Error != "" || done.DownloadMbps == nil || *done.DownloadMbps <= 0 || done.UploadMbps == nil ||
		done.RTTMillis == nil || done.MTU == nil || *done.Payload != *done.MTU-28 {
		t.Fatalf("done: %+v", done)
	}
	var audit []struct {
		Kind, Detail string
	}
	d.call("GET", "/api/security/logs", "", http.StatusOK, &audit)
	if len(audit) == 0 || audit[0].Kind != "MACHINE_SPEEDTEST_STARTED" || !strings.Contains(audit[0].Detail, `speed test of machine "nas" started (at most 1 s each way)`) {
		t.Fatalf("audit: %+v", audit)
	}

	// An agent that predates speed tests: update the machine first.
	d.a.SpeedTests.Agents = oldAgents{d.a.SpeedTests.Agents}
	if msg := d.errorOf("POST", path, `{}`, 409); !strings.Contains(msg, "predates speed tests: update the machine") {
		t.Fatalf("an old agent: %s", msg)
	}
	// A machine whose agent does not answer (nothing listens on its agent
	// port, though frps said its client connected).
	d.a.SpeedTests.Agents = d.a.Agents
	var tok struct {
		Token string `json:"token"`
	}
	d.call("POST", "/api/bootstrap/tokens", `{}`, http.StatusOK, &tok)
	d.call("POST", "/api/bootstrap", fmt.Sprintf(`{"token":%q,"name":"pi","username":"pi"}`, tok.Token), http.StatusOK, nil)
	if err := d.a.Store.SetMachineStatus(context.Background(), id+1, "online", time.Now()); err != nil {
		t.Fatal(err)
	}
	if msg := d.errorOf("POST", fmt.Sprintf("/api/machines/%d/speedtest", id+1), `{}`, 502); !strings.Contains(msg, "is not reachable (machine offline") {
		t.Fatalf("an offline machine: %s", msg)
	}
}
