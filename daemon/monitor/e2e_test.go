package monitor_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/tunnelsvc/tunnelsvc/daemon/api"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/daemontest"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/monitor"
	"github.com/tunnelsvc/tunnelsvc/daemon/notify"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

func TestMain(m *testing.M) {
	auth.LowCostForTests()
	testutil.FRP()
	os.Exit(m.Run())
}

// scrape GETs /metrics with the given Authorization header.
func scrape(t *testing.T, base, authz string) (int, map[string]*dto.MetricFamily) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics is not the Prometheus text format: %v", err)
	}
	return resp.StatusCode, fams
}

// value is the sample of family name whose labels include want, and
// whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		}
	}
	return 0, false
}

// receiver is a webhook on 127.0.0.1 that keeps what it was sent.
type receiver struct {
	mu   sync.Mutex
	got  []notify.Payload
	fail int // answer 500 to this many requests first
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.fail > 0 {
		rc.fail--
		http.Error(w, "not now", http.StatusInternalServerError)
		return
	}
	var p notify.Payload
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	rc.got = append(rc.got, p)
}

func (rc *receiver) find(kind string, machineID int64) (notify.Payload, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, p := range rc.got {
		if p.Kind == kind && p.MachineID == machineID {
			return p, true
		}
	}
	return notify.Payload{}, false
}

// transfer sends n random bytes through 127.0.0.1:port to the echo server
// behind it, reads them all back and closes the connection.
func transfer(t *testing.T, port, n int) {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	data := make([]byte, n)
	rand.Read(data)
	errc := make(chan error, 1)
	go func() { _, err := c.Write(data); errc <- err }()
	back := make([]byte, n)
	if _, err := io.ReadFull(c, back); err != nil {
		t.Fatalf("reading the echo back: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, data) {
		t.Fatal("the echo came back different")
	}
}

// TestTrafficMetricsAndOfflineNotification runs the whole daemon
// (daemontest: as `tunnelsvc serve` runs it, with its monitoring, its frps
// plugin and its notifier), a real frps on the config it wrote (with its
// dashboard API on loopback) and a real frpc, all on 127.0.0.1. It sends
// bytes through a tcp tunnel and reads them back from /metrics with
// Prometheus's own parser, then kills frpc and waits for the webhook's
// offline notice, on the daemon's own clock: after the shortest delay the
// setting takes (a minute), at the watcher's next check.
func TestTrafficMetricsAndOfflineNotification(t *testing.T) {
	ctx := context.Background()
	// One minute of the watcher's delays lasts a second here.
	const minute = time.Second
	d := daemontest.Start(t, daemontest.Options{Minute: minute})
	c, anon := d.Setup(t), d.Anon(t)
	base, traffic := d.URL, d.App.Traffic
	// The machine's sshd and its tcp service: an echo server.
	echoPort := testutil.EchoServer(t)
	_, p, _ := net.SplitHostPort(d.Config.FRPSDashboardListen)
	dashPort, _ := strconv.Atoi(p)

	// 1. /metrics: 401 without a token, before one exists, with a wrong one
	// and after revocation; 200 with the current one.
	if code, _ := scrape(t, base, ""); code != 401 {
		t.Fatalf("/metrics without a token: %d, want 401", code)
	}
	if code, _ := scrape(t, base, "Bearer anything"); code != 401 {
		t.Fatalf("/metrics with a token before any exists: %d, want 401", code)
	}
	if code, _ := anon.Call("POST", "/api/monitoring/metrics-token", nil, nil); code != 401 {
		t.Fatalf("creating a metrics token without a session: %d, want 401", code)
	}
	var tok struct {
		Token  string `json:"token"`
		Exists bool   `json:"exists"`
	}
	if code, body := c.Call("POST", "/api/monitoring/metrics-token", nil, &tok); code != 200 || tok.Token == "" || !tok.Exists {
		t.Fatalf("create metrics token: %d %s %+v", code, body, tok)
	}
	var logs []store.AuditEntry
	c.Call("GET", "/api/security/logs", nil, &logs)
	if len(logs) == 0 || logs[0].Kind != api.KindMetricsTokenCreated {
		t.Fatalf("the audit log does not show the token's creation: %+v", logs)
	}
	if code, _ := scrape(t, base, "Bearer "+tok.Token+"x"); code != 401 {
		t.Fatalf("/metrics with a wrong token: %d, want 401", code)
	}
	if code, _ := scrape(t, base, tok.Token); code != 401 {
		t.Fatalf("/metrics with the token but not as a bearer: %d, want 401", code)
	}
	var old = tok.Token
	c.Call("POST", "/api/monitoring/metrics-token", nil, &tok)
	if code, _ := scrape(t, base, "Bearer "+old); code != 401 {
		t.Fatalf("/metrics with a replaced token: %d, want 401", code)
	}
	bearer := "Bearer " + tok.Token
	code, fams := scrape(t, base, bearer)
	if code != 200 {
		t.Fatalf("/metrics with the token: %d", code)
	}
	for _, name := range []string{"tunnelsvc_machines", "tunnelsvc_logins_total", "tunnelsvc_build_info", "go_goroutines", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}

	// 2. frps runs from the config the daemon wrote, its dashboard on loopback.
	if code, body := c.Call("POST", "/api/local/reconcile", nil, nil); code != 200 {
		t.Fatalf("reconcile: %d %s", code, body)
	}
	conf, _ := os.ReadFile(d.App.Revtunnel.Path)
	if !strings.Contains(string(conf), fmt.Sprintf("webServer = {addr = '127.0.0.1', port = %d", dashPort)) {
		t.Fatalf("server.toml does not put frps's dashboard on loopback:\n%s", conf)
	}
	server := d.RunFRPS(t)
	testutil.WaitListening(t, dashPort, 10*time.Second)
	if _, fams = scrape(t, base, bearer); fams["tunnelsvc_frps_up"] == nil || fams["tunnelsvc_frps_up"].Metric[0].Gauge.GetValue() != 1 {
		t.Fatalf("tunnelsvc_frps_up is not 1 with frps running: %v", fams["tunnelsvc_frps_up"])
	}

	// 3. A machine with a tcp tunnel to the echo server.
	reg := d.Join(t, c, "alpha")
	machineID := reg.ID
	var tun struct {
		ID         int64 `json:"id"`
		RemotePort int   `json:"remote_port"`
	}
	if code, body := c.Call("POST", "/api/tunnels", map[string]any{"machine_id": machineID, "name": "db", "kind": "tcp", "local_port": echoPort}, &tun); code != 201 {
		t.Fatalf("create tunnel: %d %s", code, body)
	}
	var cc string
	if code, _ := c.Call("GET", fmt.Sprintf("/api/machines/%d/revtunnel-client", machineID), nil, &cc); code != 200 {
		t.Fatalf("client config: %d", code)
	}
	client := d.RunFRPC(t, reg.Name, cc, echoPort)
	testutil.Eventually(t, 15*time.Second, "bytes through the tcp tunnel", func() error { return testutil.Echo(tun.RemotePort) })
	// The machine's ssh tunnel is up too: its close is how frps says the
	// machine went away.
	testutil.Eventually(t, 5*time.Second, "bytes through the ssh tunnel", func() error { return testutil.Echo(reg.TunnelPort) })

	// 4. Traffic: what /metrics counts matches what went through, within 1 %.
	tunnelLabels := map[string]string{"machine_id": fmt.Sprint(machineID), "machine": "alpha", "proxy": fmt.Sprintf("tunnel-%d", tun.ID), "tunnel": "db"}
	const sent = 4 << 20
	transfer(t, tun.RemotePort, sent)
	// frps adds a connection's bytes when it closes: wait until it has
	// counted this one (the echo checks above add a few dozen bytes).
	testutil.Eventually(t, 10*time.Second, "frps counted the connection", func() error {
		_, fams = scrape(t, base, bearer)
		conns, ok := value(fams, "tunnelsvc_tunnel_connections", tunnelLabels)
		in, _ := value(fams, "tunnelsvc_tunnel_received_bytes_total", tunnelLabels)
		if !ok || conns != 0 || in < sent/2 {
			return fmt.Errorf("connections %v, received %v", conns, in)
		}
		return nil
	})
	in, _ := value(fams, "tunnelsvc_tunnel_received_bytes_total", tunnelLabels)
	out, _ := value(fams, "tunnelsvc_tunnel_sent_bytes_total", tunnelLabels)
	within1 := func(what string, got, want float64) {
		t.Helper()
		if diff := (got - want) / want; diff > 0.01 || diff < -0.01 {
			t.Errorf("%s: /metrics counted %.0f, %.0f went through (%.3f %% off)", what, got, want, diff*100)
		}
	}
	within1("tunnel bytes received", in, sent)
	within1("tunnel bytes sent", out, sent)
	t.Logf("%d bytes each way; /metrics counted %.0f received and %.0f sent", sent, in, out)
	if v, _ := value(fams, "tunnelsvc_machines", map[string]string{"status": "online"}); v != 1 {
		t.Errorf("tunnelsvc_machines{status=online} = %v, want 1", v)
	}
	if v, _ := value(fams, "tunnelsvc_tunnels", map[string]string{"kind": "tcp", "status": "online"}); v != 1 {
		t.Errorf("tunnelsvc_tunnels{kind=tcp,status=online} = %v, want 1", v)
	}
	// ...and the dashboard's 24 h chart has it too.
	var hist monitor.History
	if code, body := c.Call("GET", "/api/monitoring/traffic", nil, &hist); code != 200 {
		t.Fatalf("traffic: %d %s", code, body)
	}
	ts := hist.Tunnels[tun.ID]
	if ts == nil || ts.BytesIn < sent || ts.BytesOut < sent || len(ts.In) != monitor.HistoryBuckets {
		t.Fatalf("traffic history of the tunnel: %+v", ts)
	}
	if m := hist.Machines[machineID]; m == nil || m.BytesIn < ts.BytesIn {
		t.Fatalf("traffic history of the machine: %+v", m)
	}

	// 5. frps restarts, and its counters with it: the totals go on from
	// where they were.
	server.Stop()
	server = d.RunFRPS(t)
	testutil.Eventually(t, 30*time.Second, "the tunnel back after frps restarted", func() error { return testutil.Echo(tun.RemotePort) })
	testutil.Eventually(t, 5*time.Second, "the ssh tunnel back", func() error { return testutil.Echo(reg.TunnelPort) })
	const more = 1 << 20
	transfer(t, tun.RemotePort, more)
	// Asked directly, frps has counted the connection; the very next scrape
	// shows it (a scrape polls frps before it answers).
	testutil.Eventually(t, 10*time.Second, "frps counted the connection after its restart", func() error {
		ps, err := traffic.FRPS.Proxies(ctx)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.Name == fmt.Sprintf("m%d.tunnel-%d", machineID, tun.ID) && p.CurConns == 0 && p.TodayTrafficIn >= more {
				return nil
			}
		}
		return fmt.Errorf("not yet: %+v", ps)
	})
	// frps says its version: the pinned one.
	if v, err := traffic.FRPS.Version(ctx); err != nil || v != strings.TrimPrefix(testutil.FRPVersion(t), "v") {
		t.Fatalf("frps's version: %q %v, want %s", v, err, testutil.FRPVersion(t))
	}
	// frps says which machines are connected to it: this one.
	if got, err := traffic.FRPS.Connected(ctx); err != nil || len(got) != 1 || !got[machineID] {
		t.Fatalf("connected machines: %v %v, want machine %d only", got, err, machineID)
	}
	_, fams = scrape(t, base, bearer)
	in2, _ := value(fams, "tunnelsvc_tunnel_received_bytes_total", tunnelLabels)
	out2, _ := value(fams, "tunnelsvc_tunnel_sent_bytes_total", tunnelLabels)
	within1("tunnel bytes received across an frps restart", in2, sent+more)
	within1("tunnel bytes sent across an frps restart", out2, sent+more)

	// 6. Notifications: a bad URL is refused and changes nothing.
	rc := &receiver{}
	hook := httptest.NewServer(rc)
	t.Cleanup(hook.Close)
	for _, bad := range []map[string]any{
		{"url": "ftp://127.0.0.1/x", "preset": "json"},
		{"url": "http:///nohost", "preset": "json"},
		{"url": hook.URL, "preset": "slack"},
		{"url": hook.URL, "preset": "json", "offline_minutes": -1},
	} {
		if code, body := c.Call("PUT", "/api/monitoring/notifications", bad, nil); code != 400 || daemontest.ErrorOf(body) == "" {
			t.Errorf("PUT notifications %v: %d %s, want 400 with a message", bad, code, body)
		}
	}
	var set notify.Settings
	c.Call("GET", "/api/monitoring/notifications", nil, &set)
	if set.URL != "" {
		t.Fatalf("a refused setting was saved: %+v", set)
	}
	const delayMinutes = 2
	if code, body := c.Call("PUT", "/api/monitoring/notifications", map[string]any{"url": hook.URL + "/hook", "preset": "json", "offline_minutes": delayMinutes}, &set); code != 200 {
		t.Fatalf("PUT notifications: %d %s", code, body)
	}
	// The test button delivers now and says so; the feed records it.
	var res struct {
		Delivered bool   `json:"delivered"`
		Message   string `json:"message"`
	}
	if code, body := c.Call("POST", "/api/monitoring/notifications/test", nil, &res); code != 200 || !res.Delivered {
		t.Fatalf("test notification: %d %s %+v", code, body, res)
	}
	if _, ok := rc.find(notify.KindTest, 0); !ok {
		t.Fatal("the webhook did not receive the test notification")
	}

	// 7. frpc dies: the machine goes offline and, after the delay, the
	// webhook hears of it. The first delivery fails: it is retried.
	rc.mu.Lock()
	rc.fail = 1
	rc.mu.Unlock()
	killed := time.Now()
	client.Stop()
	testutil.Eventually(t, 10*time.Second, "frps no longer lists the machine as connected", func() error {
		got, err := traffic.FRPS.Connected(ctx)
		if err != nil || len(got) != 0 {
			return fmt.Errorf("connected: %v %v", got, err)
		}
		return nil
	})
	// The watcher looks every notify.DefaultCheckInterval (of its
	// shortened minutes); the first delivery is retried after
	// notify.FirstBackoff.
	delay := delayMinutes * minute
	testutil.Eventually(t, delay+notify.DefaultCheckInterval/(time.Minute/minute)+notify.FirstBackoff+15*time.Second, "the offline notification", func() error {
		if _, ok := rc.find(notify.KindMachineOffline, machineID); !ok {
			return fmt.Errorf("not received")
		}
		return nil
	})
	t.Logf("offline notification received %v after frpc was killed (delay %v)", time.Since(killed).Round(time.Millisecond), delay)
	rc.mu.Lock()
	retried := rc.fail == 0
	rc.mu.Unlock()
	if !retried {
		t.Fatal("the webhook's refusal was not followed by a retry")
	}
	// The sender records the delivery once the webhook's answer is back,
	// after the receiver has the payload: poll the feed for it.
	var events []store.Event
	var sentEvents, failedEvents int
	feed := func() error {
		events, sentEvents, failedEvents = nil, 0, 0
		c.Call("GET", "/api/local/activity", nil, &events)
		for _, e := range events {
			switch e.Kind {
			case notify.EventSent:
				sentEvents++
			case notify.EventFailed:
				failedEvents++
			}
		}
		if sentEvents < 2 {
			return fmt.Errorf("%d sent notifications in the feed", sentEvents)
		}
		return nil
	}
	testutil.Eventually(t, 10*time.Second, "the offline notification's delivery in the activity feed", feed)
	if failedEvents != 0 {
		t.Errorf("activity feed has %d sent and %d failed notifications, want 2 sent (the test and the offline one, retried) and none failed:\n%+v",
			sentEvents, failedEvents, events)
	}

	// 8. A deleted tunnel's series ends, though frps still reports it, and
	// its figures are not counted again after pruning.
	if code, body := c.Call("DELETE", fmt.Sprintf("/api/tunnels/%d", tun.ID), nil, nil); code != 200 {
		t.Fatalf("delete tunnel: %d %s", code, body)
	}
	// The collector prunes at each of its turns (every
	// monitor.PollInterval): one turn's pruning now.
	if err := traffic.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	_, fams = scrape(t, base, bearer)
	proxy := map[string]string{"proxy": fmt.Sprintf("tunnel-%d", tun.ID)}
	if v, ok := value(fams, "tunnelsvc_tunnel_received_bytes_total", proxy); ok {
		t.Errorf("a deleted tunnel is still exported (%v bytes)", v)
	}
	totals, _ := d.App.Store.TrafficTotals(ctx)
	for _, tt := range totals {
		if tt.TunnelID == tun.ID {
			t.Errorf("a deleted tunnel's totals came back: %+v", tt)
		}
	}
	if v, ok := value(fams, "tunnelsvc_tunnel_received_bytes_total", map[string]string{"proxy": "ssh"}); !ok || v == 0 {
		t.Errorf("the machine's ssh proxy lost its series: %v %v", v, ok)
	}

	// 9. Revoking the token closes /metrics.
	var ts2 monitor.TokenStatus
	if c.Call("GET", "/api/monitoring/metrics-token", nil, &ts2); !ts2.Exists {
		t.Fatalf("token status: %+v", ts2)
	}
	if code, _ := c.Call("DELETE", "/api/monitoring/metrics-token", nil, nil); code != 200 {
		t.Fatalf("revoke: %d", code)
	}
	if code, _ := scrape(t, base, bearer); code != 401 {
		t.Fatalf("/metrics with a revoked token: %d, want 401", code)
	}
}
