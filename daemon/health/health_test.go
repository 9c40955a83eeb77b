package health

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/notify"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// TestCheckSaysWhatItFound: each way a check can end, in words.
func TestCheckSaysWhatItFound(t *testing.T) {
	var host atomic.Value
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host.Store(r.Host + " " + r.URL.RequestURI())
		if r.URL.Path == "/teapot" {
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	defer ok.Close()
	closes, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closes.Close()
	go func() {
		for {
			c, err := closes.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 512)
			c.Read(buf)
			c.Close()
		}
	}()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var held sync.WaitGroup
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held.Add(1)
			go func() { defer held.Done(); time.Sleep(3 * time.Second); c.Close() }()
		}
	}()
	refused := testutil.FreePort(t)
	portOf := func(a net.Addr) int { return a.(*net.TCPAddr).Port }
	okPort := portOf(ok.Listener.Addr())
	c := &Checker{}
	ctx := context.Background()
	for _, tc := range []struct {
		port  int
		h     store.Health
		state string
		msg   string
	}{
		{okPort, store.Health{Path: "/healthz?x=1", IntervalS: 5}, "up", "GET /healthz?x=1 answered 200 OK in "},
		{okPort, store.Health{Path: "/teapot", IntervalS: 5}, "down", "GET /teapot answered 418 I'm a teapot; a 2xx status is expected"},
		{okPort, store.Health{Path: "/", IntervalS: 5, ExpectStatus: 204}, "down", "GET / answered 200 OK; 204 is expected"},
		{refused, store.Health{Path: "/", IntervalS: 5}, "down", fmt.Sprintf("nothing listens on tunnel port %d: nas's tunnel client is not connected", refused)},
		{portOf(closes.Addr()), store.Health{Path: "/", IntervalS: 5}, "down", "the connection closed before an answer: nothing answers on port 8080 of nas (its tunnel is up)"},
		{portOf(silent.Addr()), store.Health{Path: "/", IntervalS: 1}, "down", "no answer within 1s"},
	} {
		r := c.Check(ctx, tc.port, "wiki.example.test", tc.h, "nas", 8080)
		if r.State != tc.state || !strings.HasPrefix(r.Message, tc.msg) || r.CheckedAt.IsZero() {
			t.Errorf("port %d %+v: %+v, want %s %q", tc.port, tc.h, r, tc.state, tc.msg)
		}
	}
	if got := host.Load(); got != "wiki.example.test /" {
		t.Errorf("the last request the service saw: %v, want the site's Host and the path", got)
	}
	silent.Close()
	held.Wait()
}

// TestTickRecordsChangesAndTellsWhenTheSiteIsDown: a site on two
// machines, checked on its interval: a machine going down is an event, the
// second one going down too is a notification that the site is down, and
// one coming back is an event and a notification that it is up again.
func TestTickRecordsChangesAndTellsWhenTheSiteIsDown(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := store.PortRange{Lo: 30000, Hi: 30099}
	var ids []int64
	for _, name := range []string{"nas", "standby"} {
		m, err := st.RegisterMachine(ctx, store.NewMachine{Name: name, Username: "pi", SecretHash: name, AgentTokenHash: name + "a",
			Seal: func(int64) (string, error) { return "sealed", nil }, Now: time.Now(), Ports: r})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	web, err := st.InsertTunnel(ctx, store.Tunnel{MachineID: ids[0], Name: "wiki", Kind: "http", LocalPort: 80, Subdomain: "wiki",
		Health: store.Health{Path: "/healthz", IntervalS: 10}}, r, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ts, err := st.SetTargets(ctx, web.ID, []store.TargetSpec{{MachineID: ids[1], LocalPort: 81}}, r)
	if err != nil {
		t.Fatal(err)
	}
	// Each machine's part: a service that is up while its flag is.
	var up [2]atomic.Bool
	addr := map[int]string{}
	for i, port := range []int{web.RemotePort, ts[0].RemotePort} {
		up[i].Store(true)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !up[i].Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}))
		defer srv.Close()
		addr[port] = strings.TrimPrefix(srv.URL, "http://")
	}
	now := time.Unix(1_800_000_000, 0)
	var mu sync.Mutex
	var sent []notify.Notification
	c := &Checker{Store: st, Now: func() time.Time { return now },
		Domain: func(context.Context) (string, error) { return "example.test", nil },
		Addr:   func(port int) string { return addr[port] },
		Notify: func(_ context.Context, n notify.Notification) { mu.Lock(); sent = append(sent, n); mu.Unlock() }}
	events := func() []string {
		es, err := st.RecentEvents(ctx, 50)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			if strings.HasPrefix(e.Kind, "target_") {
				out = append(out, e.Kind+": "+e.Message)
			}
		}
		return out
	}
	tick := func(advance time.Duration) {
		t.Helper()
		now = now.Add(advance)
		if err := c.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tick(0)
	if r, ok := c.Result(web.ID, ts[0].RemotePort); !ok || r.State != "up" || len(events()) != 0 {
		t.Fatalf("first check: %+v %v, events %q", r, ok, events())
	}
	up[1].Store(false)
	tick(5 * time.Second) // not due: interval 10 s
	if r, _ := c.Result(web.ID, ts[0].RemotePort); r.State != "up" {
		t.Fatal("checked before its interval")
	}
	tick(5 * time.Second)
	if r, _ := c.Result(web.ID, ts[0].RemotePort); r.State != "down" {
		t.Fatalf("standby after its service failed: %+v", r)
	}
	if es := events(); len(es) != 1 || es[0] != `target_down: wiki.example.test on machine "standby" (port 81) is down: GET /healthz answered 503 Service Unavailable; a 2xx status is expected` {
		t.Fatalf("events: %q", es)
	}
	if len(sent) != 0 {
		t.Fatalf("a notification while one machine still serves: %+v", sent)
	}
	up[0].Store(false)
	tick(10 * time.Second)
	tick(10 * time.Second) // still down: told once
	if len(sent) != 1 || sent[0].Kind != notify.KindSiteDown || sent[0].Title != "wiki.example.test is down" ||
		!strings.Contains(sent[0].Message, `nas: GET /healthz answered 503 Service Unavailable`) {
		t.Fatalf("notifications: %+v", sent)
	}
	up[1].Store(true)
	tick(10 * time.Second)
	if len(sent) != 2 || sent[1].Kind != notify.KindSiteUp || sent[1].Title != "wiki.example.test is up again" {
		t.Fatalf("notifications: %+v", sent)
	}
	if es := events(); len(es) != 3 || !strings.HasPrefix(es[0], `target_up: wiki.example.test on machine "standby" (port 81) is up: GET /healthz answered 200 OK in`) {
		t.Fatalf("events: %q", es)
	}
	// Another edge holds the lease: this one keeps its results for its
	// dashboard, and records and sends nothing.
	c.Lease = func(context.Context) bool { return false }
	up[1].Store(false)
	up[0].Store(false)
	tick(10 * time.Second)
	if r, _ := c.Result(web.ID, ts[0].RemotePort); r.State != "down" || len(events()) != 3 || len(sent) != 2 {
		t.Fatalf("without the lease: %+v, %d events, %d notifications", r, len(events()), len(sent))
	}
	c.Lease = nil
	// No check any more: the results go.
	web.Health = store.Health{}
	if err := st.UpdateTunnel(ctx, web); err != nil {
		t.Fatal(err)
	}
	tick(10 * time.Second)
	if _, ok := c.Result(web.ID, web.RemotePort); ok {
		t.Fatal("a result kept for a tunnel no longer checked")
	}
}
