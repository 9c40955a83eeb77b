package revtunnel_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/health"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

// origin is a machine's web service: it answers its name, and 200 on
// /healthz, until stopped; started again, it listens on the same port.
type origin struct {
	name string
	port int
	srv  *http.Server
}

func startOrigin(t *testing.T, name string, port int) *origin {
	t.Helper()
	o := &origin{name: name, port: port}
	o.start(t)
	t.Cleanup(func() { o.stop() })
	return o
}

func (o *origin) start(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", o.port))
	if err != nil {
		t.Fatal(err)
	}
	o.port = l.Addr().(*net.TCPAddr).Port
	o.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, o.name) })}
	go o.srv.Serve(l)
}

func (o *origin) stop() {
	if o.srv != nil {
		o.srv.Close()
	}
}

// answer is one GET through the web proxy.
type answer struct {
	at   time.Time
	code int
	body string
	err  error
}

// TestSiteOnTwoMachines: one http tunnel served by two machines through
// real frps, two real frpc and a real Caddy on the daemon's Caddyfile, with
// a health check every second. With failover, the first machine serves;
// stopped, within two intervals no request fails and the other serves
// them all; started again, it serves again. The dashboard's view of the
// targets says what the checks found, and the changes are events.
func TestSiteOnTwoMachines(t *testing.T) {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Skip("caddy is not installed (scripts/install-deps.sh installs it)")
	}
	e := startEngine(t)
	if code, body := e.c.Call("POST", "/api/local/skip", map[string]string{"domain": "example.test"}, nil); code != 200 {
		t.Fatalf("domain: %d %s", code, body)
	}
	alpha, beta := e.register("alpha"), e.register("beta")
	ca, cb := e.runClient("alpha", alpha.ClientConfig), e.runClient("beta", beta.ClientConfig)
	eventually(t, 15*time.Second, "both machines connected", func() error {
		if err := echo(alpha.TunnelPort); err != nil {
			return err
		}
		return echo(beta.TunnelPort)
	})
	aID, bID := int64(e.machineByName("alpha")["id"].(float64)), int64(e.machineByName("beta")["id"].(float64))
	oa, ob := startOrigin(t, "alpha", 0), startOrigin(t, "beta", 0)

	var tun struct {
		ID      int64 `json:"id"`
		Balance string
		Targets []struct {
			MachineID  int64  `json:"machine_id"`
			LocalPort  int    `json:"local_port"`
			RemotePort int    `json:"remote_port"`
			Status     string `json:"status"`
			Health     struct{ State, Message string }
		}
	}
	body := map[string]any{"name": "web", "kind": "http", "subdomain": "web", "balance": "failover",
		"targets": []map[string]any{{"machine_id": aID, "local_port": oa.port}, {"machine_id": bID, "local_port": ob.port}},
		"health":  map[string]any{"path": "/healthz", "interval_s": 1}}
	if code, _ := e.c.Call("POST", "/api/tunnels", body, &tun); code != 201 {
		t.Fatalf("create: %d", code)
	}
	if len(tun.Targets) != 2 || tun.Targets[0].MachineID != aID || tun.Targets[1].MachineID != bID || tun.Balance != "failover" ||
		tun.Targets[1].RemotePort == 0 || tun.Targets[1].RemotePort == tun.Targets[0].RemotePort {
		t.Fatalf("tunnel = %+v", tun)
	}
	// Each machine's config opens its part.
	confOf := func(id int64) string {
		var conf string
		if code, _ := e.c.Call("GET", fmt.Sprintf("/api/machines/%d/revtunnel-client", id), nil, &conf); code != 200 {
			t.Fatalf("client config of %d: %d %s", id, code, conf)
		}
		return conf
	}
	confB := confOf(bID)
	if !strings.Contains(confB, fmt.Sprintf("remotePort = %d", tun.Targets[1].RemotePort)) {
		t.Fatalf("beta's config does not open its target:\n%s", confB)
	}
	ca.Stop()
	cb.Stop()
	e.runClient("alpha", confOf(aID))
	e.runClient("beta", confB)

	// Caddy on the daemon's own Caddyfile, plain HTTP on loopback.
	tunnels, err := localsetup.StoreTunnels{Store: e.st}.HTTPTunnels(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	caddyPort := testutil.FreePort(t)
	file, err := webproxy.Render(webproxy.Input{Domain: "example.test", Dashboard: "127.0.0.1:1", Tunnels: tunnels,
		PlainHTTPPort: caddyPort, Admin: "off"})
	if err != nil {
		t.Fatal(err)
	}
	testutil.StartCaddy(t, file, caddyPort)

	client := &http.Client{Timeout: 10 * time.Second}
	get := func() answer {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/", caddyPort), nil)
		req.Host = "web.example.test"
		a := answer{}
		resp, err := client.Do(req)
		a.at = time.Now()
		if err != nil {
			a.err = err
			return a
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		a.code, a.body = resp.StatusCode, string(b)
		return a
	}
	eventually(t, 20*time.Second, "alpha serves the site (failover: the first target)", func() error {
		if a := get(); a.body != "alpha" {
			return fmt.Errorf("%d %q %v", a.code, a.body, a.err)
		}
		return nil
	})

	// The daemon's health checker sees both well.
	eventually(t, 10*time.Second, "both targets checked up", func() error {
		e.c.Call("GET", fmt.Sprintf("/api/tunnels/%d", tun.ID), nil, &tun)
		for _, tg := range tun.Targets {
			if tg.Health.State != "up" || !strings.HasPrefix(tg.Health.Message, "GET /healthz answered 200 OK in") || tg.Status != "active" {
				return fmt.Errorf("target before the stop: %+v", tg)
			}
		}
		return nil
	})

	// A steady visitor: a request every 20 ms, all the way through.
	var mu sync.Mutex
	var answers []answer
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		for {
			select {
			case <-stopLoad:
				return
			case <-time.After(20 * time.Millisecond):
			}
			a := get()
			mu.Lock()
			answers = append(answers, a)
			mu.Unlock()
		}
	}()
	time.Sleep(500 * time.Millisecond)
	oa.stop()
	stopped := time.Now()
	time.Sleep(4 * time.Second)
	e.c.Call("GET", fmt.Sprintf("/api/tunnels/%d", tun.ID), nil, &tun)
	if h := tun.Targets[0].Health; h.State != "down" || !strings.Contains(h.Message, "the connection closed before an answer: nothing answers on port") {
		t.Fatalf("alpha's health while it is stopped: %+v", h)
	}
	if h := tun.Targets[1].Health; h.State != "up" {
		t.Fatalf("beta's health while alpha is stopped: %+v", h)
	}
	oa.start(t)
	restarted := time.Now()
	eventually(t, 10*time.Second, "alpha serves again after its restart", func() error {
		mu.Lock()
		defer mu.Unlock()
		if n := len(answers); n > 0 && answers[n-1].body == "alpha" && answers[n-1].at.After(restarted) {
			return nil
		}
		return fmt.Errorf("not yet")
	})
	close(stopLoad)
	<-loadDone

	failedEarly, byBeta := 0, 0
	for _, a := range answers {
		ok := a.err == nil && a.code == 200
		switch {
		case a.at.Before(stopped):
		case a.at.Before(stopped.Add(2 * time.Second)):
			// Within two intervals of the stop: Caddy retries a GET on
			// the other machine, so even these should not fail; counted.
			if !ok {
				failedEarly++
			}
		case a.at.Before(restarted):
			if !ok || a.body != "beta" {
				t.Errorf("%v after the stop (past 2 intervals): %d %q %v", a.at.Sub(stopped).Round(time.Millisecond), a.code, a.body, a.err)
			}
			byBeta++
		}
	}
	if byBeta < 20 {
		t.Fatalf("only %d answers between 2 s after the stop and the restart", byBeta)
	}
	t.Logf("%d requests in all; within 2 intervals of the stop %d failed; after them all %d went to beta", len(answers), failedEarly, byBeta)

	// What the dashboard said while alpha was down, and the events.
	if err := e.hasEvent(health.EventTargetDown, `machine "alpha"`); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "alpha healthy again in the dashboard", func() error {
		e.c.Call("GET", fmt.Sprintf("/api/tunnels/%d", tun.ID), nil, &tun)
		if h := tun.Targets[0].Health; h.State != "up" {
			return fmt.Errorf("%+v", h)
		}
		return nil
	})
	if err := e.hasEvent(health.EventTargetUp, `machine "alpha"`); err != nil {
		t.Fatal(err)
	}
}
