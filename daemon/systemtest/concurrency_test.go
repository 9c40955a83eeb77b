package systemtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testbed"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// TestJobsWhileTheDashboardPolls: the socket-activated daemon, real frps and
// real caddy under a real systemd. Twenty installs and twenty unit restarts
// run one after another while ten clients poll the status and a unit's
// state, as open dashboards do. Every job must end "done", and the shared
// systemd connection must never be reopened: requests that end may not
// close it under the jobs of others.
func TestJobsWhileTheDashboardPolls(t *testing.T) {
	parallel(t)
	bin := buildDaemon(t)
	frps, _ := testutil.FRP()
	h := testbed.Boot(t, "vps")
	root := testbed.Root(t)
	h.CopyIn(bin, "/usr/bin/tunnelsvc", 0o755)
	h.CopyIn(frps, "/usr/lib/tunnelsvc/frps", 0o755)
	for _, u := range []string{"tunnelsvc.socket", "tunnelsvc.service", "revtunnel-server.service"} {
		h.CopyIn(filepath.Join(root, "systemd", u), "/etc/systemd/system/"+u, 0o644)
	}
	h.Must("systemctl", "daemon-reload")
	h.Must("systemctl", "enable", "--now", "tunnelsvc.socket")
	jar, _ := cookiejar.New(nil)
	v := &vps{Host: h, t: t, client: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: h.DialContext, MaxIdleConnsPerHost: 16}}}
	journal := func() string {
		out, _ := h.Exec("journalctl", "--no-pager", "-n", "60", "-u", "tunnelsvc.service")
		return out
	}
	v.data("POST", "/api/auth/setup", `{"password":"`+password+`"}`, 200)

	// The log WebSocket tells each install's outcome.
	dialer := websocket.Dialer{NetDialContext: h.DialContext, Jar: jar, HandshakeTimeout: 10 * time.Second}
	ws, resp, err := dialer.Dial("ws://127.0.0.1:7380/api/local/logs/ws", nil)
	if err != nil {
		t.Fatalf("log WebSocket: %v (%v)", err, resp)
	}
	defer ws.Close()
	type message struct {
		Line string `json:"line"`
		Done bool   `json:"done"`
		OK   *bool  `json:"ok"`
	}
	outcomes := make(chan message, 64)
	go func() {
		defer close(outcomes)
		for {
			var m message
			if err := ws.ReadJSON(&m); err != nil {
				return
			}
			outcomes <- m
		}
	}()

	// Ten pollers, each bounded by the stop channel and 2,000 requests.
	stop := make(chan struct{})
	var polls, pollErrors atomic.Int64
	var firstPollError atomic.Value
	var wg sync.WaitGroup
	paths := []string{"/api/local/status", "/api/units/revtunnel-server", "/api/units/caddy"}
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for n := 0; n < 2000; n++ {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				path := paths[(i+n)%len(paths)]
				req, _ := http.NewRequest("GET", dashboard+path, nil)
				resp, err := v.client.Do(req)
				polls.Add(1)
				if err != nil {
					pollErrors.Add(1)
					firstPollError.CompareAndSwap(nil, err.Error())
					continue
				}
				var body struct {
					Data json.RawMessage `json:"data"`
				}
				json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				if resp.StatusCode != 200 || strings.Contains(string(body.Data), `"error":"`) {
					pollErrors.Add(1)
					firstPollError.CompareAndSwap(nil, fmt.Sprintf("%s: %d %s", path, resp.StatusCode, body.Data))
				}
			}
		}(i)
	}
	defer func() { close(stop); wg.Wait() }()

	for i := 1; i <= 20; i++ {
		body := `{"domain":"example.test","server_host":"127.0.0.1"}`
		if i%2 == 0 {
			body = `{"skip_webproxy":true,"server_host":"127.0.0.1"}`
		}
		v.data("POST", "/api/local/install", body, 200)
		var lines []string
		deadline := time.After(90 * time.Second)
	wait:
		for {
			select {
			case m, ok := <-outcomes:
				if !ok {
					t.Fatalf("install %d: the log WebSocket closed", i)
				}
				if !m.Done {
					lines = append(lines, m.Line)
					continue
				}
				if m.OK == nil || !*m.OK {
					t.Fatalf("install %d failed:\n%s\njournal:\n%s", i, strings.Join(lines, "\n"), journal())
				}
				break wait
			case <-deadline:
				t.Fatalf("install %d: no outcome within 90 s:\n%s", i, strings.Join(lines, "\n"))
			}
		}
		a := v.do("POST", "/api/units/revtunnel-server/restart", "")
		if a.status != 200 || a.unit(t)["active_state"] != "active" {
			t.Fatalf("restart %d: %d %s\njournal:\n%s", i, a.status, a.raw, journal())
		}
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{})

	t.Logf("%d status and unit polls during the jobs, %d failed", polls.Load(), pollErrors.Load())
	if polls.Load() < 100 {
		t.Fatalf("only %d polls ran beside the jobs; the test did not load the connection", polls.Load())
	}
	if n := pollErrors.Load(); n > 0 {
		t.Fatalf("%d polls failed; first: %v", n, firstPollError.Load())
	}
	if out, _ := h.Exec("journalctl", "--no-pager", "-u", "tunnelsvc.service", "-g", "reconnecting"); strings.Contains(out, "systemd connection closed") {
		t.Fatalf("the systemd connection was reopened while nothing went away:\n%s", out)
	}
}
