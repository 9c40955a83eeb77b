package monitor_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/crypto/ssh"

	"github.com/tunnelsvc/tunnelsvc/daemon/api"
	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/monitor"
	"github.com/tunnelsvc/tunnelsvc/daemon/notify"
	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
)

var frps, frpc string

func TestMain(m *testing.M) {
	auth.LowCostForTests()
	frps, frpc = testutil.FRP()
	os.Exit(m.Run())
}

type keys struct{ key string }

func (k keys) DefaultPublicKey(context.Context) (string, error) { return k.key, nil }

// client is a dashboard client (with a session once logged in).
type client struct {
	t    *testing.T
	base string
	http *http.Client
}

// call sends body as JSON and decodes the answer's data into out; it
// returns the status and the error message, if any.
func (c *client) call(method, path string, body, out any) (int, string) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.base+path, rd)
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var env struct {
		Data  json.RawMessage `json:"data"`
		Error string          `json:"error"`
	}
	raw, _ := io.ReadAll(resp.Body)
	json.Unmarshal(raw, &env)
	if out != nil && resp.StatusCode < 300 {
		if s, ok := out.(*string); ok {
			*s = string(raw)
		} else if err := json.Unmarshal(env.Data, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
	return resp.StatusCode, env.Error
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

// TestTrafficMetricsAndOfflineNotification runs the daemon's API with its
// monitoring, its frps plugin, a real frps (with its dashboard API on
// loopback) and a real frpc, all on 127.0.0.1. It sends bytes through a
// tcp tunnel and reads them back from /metrics with Prometheus's own
// parser, then kills frpc and waits for the webhook's offline notice.
func TestTrafficMetricsAndOfflineNotification(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	st, err := store.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sealer, err := seal.LoadOrCreate(data)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	echoPort := testutil.EchoServer(t)
	frpsPort := testutil.FreePort(t)
	dashPort := testutil.FreePort(t)
	// Below the ephemeral range (32768+), where outgoing connections would
	// take the ports frps is to listen on.
	lo := 10000 + mrand.IntN(20000)
	ports := store.PortRange{Lo: lo, Hi: lo + 99}

	plugin := httptest.NewServer(&revtunnel.Plugin{Store: st, Log: log})
	t.Cleanup(plugin.Close)

	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sp, _ := ssh.NewPublicKey(pub)
	clientConf := filepath.Join(dir, "client.toml")
	svc := &machines.Service{
		Store: st, Sealer: sealer, Keys: keys{string(ssh.MarshalAuthorizedKey(sp))}, Log: log,
		Limiter: auth.NewLimiter(nil), Ports: ports, Reach: &reach.Resolver{ServerHost: "127.0.0.1"}, FRPSPort: frpsPort,
		SSHLocalPort: echoPort, ClientAdminPort: testutil.FreePort(t), ClientConfigPath: clientConf,
	}
	password, err := monitor.DashboardPassword(ctx, st, sealer)
	if err != nil {
		t.Fatal(err)
	}
	deployer := &revtunnel.Deployer{
		Path: filepath.Join(dir, "root", revtunnel.ServerConfigPath), FRPS: frps,
		CA:       &tunnelca.Authority{Store: st, Sealer: sealer},
		CertPath: filepath.Join(dir, "root", revtunnel.ServerCertPath), KeyPath: filepath.Join(dir, "root", revtunnel.ServerKeyPath),
	}
	deployer.Params = func(context.Context) (frpconf.ServerParams, error) {
		return frpconf.ServerParams{BindPort: frpsPort, PluginAddr: strings.TrimPrefix(plugin.URL, "http://"), Ports: ports,
			CertFile: deployer.CertPath, KeyFile: deployer.KeyPath,
			Dashboard: &frpconf.Dashboard{Addr: "127.0.0.1", Port: dashPort, User: frpconf.DashboardUser, Password: password}}, nil
	}

	traffic := &monitor.Traffic{Store: st, Log: log,
		FRPS: &monitor.FRPS{Addr: fmt.Sprintf("127.0.0.1:%d", dashPort), User: frpconf.DashboardUser, Password: password}}
	tokens := &monitor.Tokens{Store: st}
	sender := &notify.Sender{Store: st, Log: log, Backoff: 50 * time.Millisecond}
	// One "minute" of the offline delay lasts a second here.
	watcher := &notify.Watcher{Store: st, Sender: sender, Log: log, Interval: 200 * time.Millisecond, Minute: time.Second}
	wctx, stopWatcher := context.WithCancel(ctx)
	t.Cleanup(func() { stopWatcher(); sender.Wait() })
	go watcher.Run(wctx)

	cfg := config.Default()
	cfg.DataDir = data
	rec := &audit.Recorder{Store: st, Log: log, Now: time.Now}
	authSvc := &auth.Service{Store: st, Log: log, Audit: rec, DataDir: data, Now: time.Now,
		Sessions: &auth.Sessions{Store: st, Now: time.Now}, Limiter: auth.NewLimiter(nil)}
	srv := httptest.NewServer(api.New(api.Options{Config: &cfg, Auth: authSvc, Audit: rec, Log: log, Machines: svc, Reach: svc.Reach, Revtunnel: deployer,
		Monitoring: api.Monitoring{Metrics: monitor.New(monitor.Options{Store: st, Tokens: tokens, Traffic: traffic, Log: log}),
			Tokens: tokens, Traffic: traffic, Notify: sender}}))
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	c := &client{t: t, base: srv.URL, http: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
	anon := &client{t: t, base: srv.URL, http: &http.Client{Timeout: 30 * time.Second}}
	if code, msg := c.call("POST", "/api/auth/setup", map[string]string{"password": "correct horse battery staple"}, nil); code != 200 {
		t.Fatalf("setup: %d %s", code, msg)
	}

	// 1. /metrics: 401 without a token, before one exists, with a wrong one
	// and after revocation; 200 with the current one.
	if code, _ := scrape(t, srv.URL, ""); code != 401 {
		t.Fatalf("/metrics without a token: %d, want 401", code)
	}
	if code, _ := scrape(t, srv.URL, "Bearer anything"); code != 401 {
		t.Fatalf("/metrics with a token before any exists: %d, want 401", code)
	}
	if code, _ := anon.call("POST", "/api/monitoring/metrics-token", nil, nil); code != 401 {
		t.Fatalf("creating a metrics token without a session: %d, want 401", code)
	}
	var tok struct {
		Token  string `json:"token"`
		Exists bool   `json:"exists"`
	}
	if code, msg := c.call("POST", "/api/monitoring/metrics-token", nil, &tok); code != 200 || tok.Token == "" || !tok.Exists {
		t.Fatalf("create metrics token: %d %s %+v", code, msg, tok)
	}
	var logs []store.AuditEntry
	c.call("GET", "/api/security/logs", nil, &logs)
	if len(logs) == 0 || logs[0].Kind != api.KindMetricsTokenCreated {
		t.Fatalf("the audit log does not show the token's creation: %+v", logs)
	}
	if code, _ := scrape(t, srv.URL, "Bearer "+tok.Token+"x"); code != 401 {
		t.Fatalf("/metrics with a wrong token: %d, want 401", code)
	}
	if code, _ := scrape(t, srv.URL, tok.Token); code != 401 {
		t.Fatalf("/metrics with the token but not as a bearer: %d, want 401", code)
	}
	var old = tok.Token
	c.call("POST", "/api/monitoring/metrics-token", nil, &tok)
	if code, _ := scrape(t, srv.URL, "Bearer "+old); code != 401 {
		t.Fatalf("/metrics with a replaced token: %d, want 401", code)
	}
	bearer := "Bearer " + tok.Token
	code, fams := scrape(t, srv.URL, bearer)
	if code != 200 {
		t.Fatalf("/metrics with the token: %d", code)
	}
	for _, name := range []string{"tunnelsvc_machines", "tunnelsvc_logins_total", "tunnelsvc_build_info", "go_goroutines", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}

	// 2. frps runs from the config the daemon wrote, its dashboard on loopback.
	if code, msg := c.call("POST", "/api/local/reconcile", nil, nil); code != 200 {
		t.Fatalf("reconcile: %d %s", code, msg)
	}
	conf, _ := os.ReadFile(deployer.Path)
	if !strings.Contains(string(conf), fmt.Sprintf("webServer = {addr = '127.0.0.1', port = %d", dashPort)) {
		t.Fatalf("server.toml does not put frps's dashboard on loopback:\n%s", conf)
	}
	server := testutil.Start(t, "frps", frps, "-c", deployer.Path)
	testutil.WaitListening(t, frpsPort, 10*time.Second)
	testutil.WaitListening(t, dashPort, 10*time.Second)
	if _, fams = scrape(t, srv.URL, bearer); fams["tunnelsvc_frps_up"] == nil || fams["tunnelsvc_frps_up"].Metric[0].Gauge.GetValue() != 1 {
		t.Fatalf("tunnelsvc_frps_up is not 1 with frps running: %v", fams["tunnelsvc_frps_up"])
	}

	// 3. A machine with a tcp tunnel to the echo server.
	var bt struct{ Token string }
	c.call("POST", "/api/bootstrap/tokens", map[string]any{}, &bt)
	var reg struct {
		TunnelPort int `json:"tunnel_port"`
	}
	if code, msg := anon.call("POST", "/api/bootstrap", map[string]string{"token": bt.Token, "name": "alpha", "username": "pi"}, &reg); code != 200 {
		t.Fatalf("bootstrap: %d %s", code, msg)
	}
	var ms []struct {
		ID int64 `json:"id"`
	}
	c.call("GET", "/api/machines", nil, &ms)
	machineID := ms[0].ID
	var tun struct {
		ID         int64 `json:"id"`
		RemotePort int   `json:"remote_port"`
	}
	if code, msg := c.call("POST", "/api/tunnels", map[string]any{"machine_id": machineID, "name": "db", "kind": "tcp", "local_port": echoPort}, &tun); code != 201 {
		t.Fatalf("create tunnel: %d %s", code, msg)
	}
	var cc string
	if code, _ := c.call("GET", fmt.Sprintf("/api/machines/%d/revtunnel-client", machineID), nil, &cc); code != 200 {
		t.Fatalf("client config: %d", code)
	}
	if err := os.WriteFile(clientConf, []byte(cc), 0o600); err != nil {
		t.Fatal(err)
	}
	client := testutil.Start(t, "frpc", frpc, "-c", clientConf)
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
		_, fams = scrape(t, srv.URL, bearer)
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
	if code, msg := c.call("GET", "/api/monitoring/traffic", nil, &hist); code != 200 {
		t.Fatalf("traffic: %d %s", code, msg)
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
	server = testutil.Start(t, "frps again", frps, "-c", deployer.Path)
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
	// frps says which machines are connected to it: this one.
	if got, err := traffic.FRPS.Connected(ctx); err != nil || len(got) != 1 || !got[machineID] {
		t.Fatalf("connected machines: %v %v, want machine %d only", got, err, machineID)
	}
	_, fams = scrape(t, srv.URL, bearer)
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
		if code, msg := c.call("PUT", "/api/monitoring/notifications", bad, nil); code != 400 || msg == "" {
			t.Errorf("PUT notifications %v: %d %q, want 400 with a message", bad, code, msg)
		}
	}
	var set notify.Settings
	c.call("GET", "/api/monitoring/notifications", nil, &set)
	if set.URL != "" {
		t.Fatalf("a refused setting was saved: %+v", set)
	}
	const delayMinutes = 2
	if code, msg := c.call("PUT", "/api/monitoring/notifications", map[string]any{"url": hook.URL + "/hook", "preset": "json", "offline_minutes": delayMinutes}, &set); code != 200 {
		t.Fatalf("PUT notifications: %d %s", code, msg)
	}
	// The test button delivers now and says so; the feed records it.
	var res struct {
		Delivered bool   `json:"delivered"`
		Message   string `json:"message"`
	}
	if code, msg := c.call("POST", "/api/monitoring/notifications/test", nil, &res); code != 200 || !res.Delivered {
		t.Fatalf("test notification: %d %s %+v", code, msg, res)
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
	delay := delayMinutes * time.Second // watcher.Minute is a second
	testutil.Eventually(t, delay+10*time.Second, "the offline notification", func() error {
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
		c.call("GET", "/api/local/activity", nil, &events)
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
	if code, msg := c.call("DELETE", fmt.Sprintf("/api/tunnels/%d", tun.ID), nil, nil); code != 200 {
		t.Fatalf("delete tunnel: %d %s", code, msg)
	}
	if err := traffic.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	_, fams = scrape(t, srv.URL, bearer)
	proxy := map[string]string{"proxy": fmt.Sprintf("tunnel-%d", tun.ID)}
	if v, ok := value(fams, "tunnelsvc_tunnel_received_bytes_total", proxy); ok {
		t.Errorf("a deleted tunnel is still exported (%v bytes)", v)
	}
	totals, _ := st.TrafficTotals(ctx)
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
	if c.call("GET", "/api/monitoring/metrics-token", nil, &ts2); !ts2.Exists {
		t.Fatalf("token status: %+v", ts2)
	}
	if code, _ := c.call("DELETE", "/api/monitoring/metrics-token", nil, nil); code != 200 {
		t.Fatalf("revoke: %d", code)
	}
	if code, _ := scrape(t, srv.URL, bearer); code != 401 {
		t.Fatalf("/metrics with a revoked token: %d, want 401", code)
	}
}
