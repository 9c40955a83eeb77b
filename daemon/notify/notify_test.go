package notify_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/notify"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// hook is a webhook receiver on 127.0.0.1.
type hook struct {
	mu       sync.Mutex
	requests []*http.Request
	bodies   []string
	times    []time.Time
	status   int // answer this instead of 200 when set
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests = append(h.requests, r)
	h.times = append(h.times, time.Now())
	h.bodies = append(h.bodies, string(b))
	if h.status != 0 {
		http.Error(w, "refused", h.status)
	}
}

func (h *hook) kinds() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, b := range h.bodies {
		var p notify.Payload
		json.Unmarshal([]byte(b), &p)
		out = append(out, p.Kind)
	}
	return out
}

// clock is the tests' time; deliveries read it from their goroutines.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type env struct {
	st     *store.Store
	hook   *hook
	url    string
	sender *notify.Sender
	clock  *clock
}

func newEnv(t *testing.T, preset string) *env {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &hook{}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e := &env{st: st, hook: h, url: srv.URL + "/topic", clock: &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}}
	e.sender = &notify.Sender{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Backoff: time.Millisecond,
		Now: e.clock.Now}
	if _, err := notify.Save(context.Background(), st, notify.Settings{URL: e.url, Preset: preset, OfflineMinutes: 5}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) events(t *testing.T) []store.Event {
	t.Helper()
	evs, err := e.st.RecentEvents(context.Background(), 50)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestSettingsValidation(t *testing.T) {
	for _, c := range []struct {
		in   notify.Settings
		want string
	}{
		{notify.Settings{URL: "ftp://example.com/x"}, "http or https URL with a host"},
		{notify.Settings{URL: "https://"}, "http or https URL with a host"},
		{notify.Settings{URL: "example.com/x"}, "http or https URL with a host"},
		{notify.Settings{URL: "https://user:pw@example.com/x"}, "must not carry a user name"},
		{notify.Settings{URL: "https://example.com/" + strings.Repeat("a", 2100)}, "at most 2048"},
		{notify.Settings{URL: "https://example.com/x", Preset: "slack"}, "preset must be one of"},
		{notify.Settings{URL: "https://example.com/x", OfflineMinutes: 1441}, "offline_minutes must be between"},
		{notify.Settings{URL: "https://example.com/x", OfflineMinutes: -3}, "offline_minutes must be between"},
	} {
		err := c.in.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.in, err, c.want)
		}
	}
	ok := notify.Settings{URL: " https://ntfy.example.com/alerts "}
	if err := ok.Validate(); err != nil || ok.Preset != notify.PresetJSON || ok.OfflineMinutes != notify.DefaultOfflineMinutes || ok.URL != "https://ntfy.example.com/alerts" {
		t.Fatalf("defaults: %+v %v", ok, err)
	}
}

// A webhook that keeps refusing gets MaxAttempts tries, then the failure
// is in the activity feed.
func TestDeliveryRetriedThenRecordedAsFailed(t *testing.T) {
	e := newEnv(t, notify.PresetJSON)
	e.hook.status = http.StatusServiceUnavailable
	e.sender.Backoff = 20 * time.Millisecond
	e.sender.Notify(context.Background(), notify.Notification{Kind: notify.KindBanned, Title: "address banned: 192.0.2.7", Message: "x"})
	e.sender.Wait()
	if n := len(e.hook.kinds()); n != notify.MaxAttempts {
		t.Fatalf("the webhook got %d attempts, want %d", n, notify.MaxAttempts)
	}
	// Each wait is at least twice the one before (lower bounds only).
	for i := 1; i < len(e.hook.times); i++ {
		if gap, least := e.hook.times[i].Sub(e.hook.times[i-1]), e.sender.Backoff<<(i-1); gap < least {
			t.Errorf("attempt %d came %v after the previous one, want at least %v", i+1, gap, least)
		}
	}
	evs := e.events(t)
	if len(evs) != 1 || evs[0].Kind != notify.EventFailed || !strings.Contains(evs[0].Message, "503") ||
		!strings.Contains(evs[0].Message, "after 5 attempt(s)") ||
		!strings.Contains(evs[0].Message, "address banned: 192.0.2.7") {
		t.Fatalf("activity feed: %+v", evs)
	}
	if strings.Contains(evs[0].Message, "/topic") {
		t.Fatalf("the feed shows the webhook URL (it may be a secret): %s", evs[0].Message)
	}
}

// TestDeliveryEndsWithTheDaemon: a delivery waiting to try again does not
// outlive the daemon: once its life ends, it gives up and Wait returns,
// with the failure in the activity feed.
func TestDeliveryEndsWithTheDaemon(t *testing.T) {
	e := newEnv(t, notify.PresetJSON)
	e.hook.status = http.StatusServiceUnavailable
	e.sender.Backoff = time.Hour
	life, end := context.WithCancel(context.Background())
	e.sender.Life = life
	e.sender.Notify(context.Background(), notify.Notification{Kind: notify.KindBanned, Title: "address banned: 192.0.2.7", Message: "x"})
	for deadline := time.Now().Add(5 * time.Second); len(e.hook.kinds()) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first attempt never came")
		}
	}
	end()
	done := make(chan struct{})
	go func() { e.sender.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a delivery outlived the daemon by 5 s (its next try was an hour away)")
	}
	if n := len(e.hook.kinds()); n != 1 {
		t.Fatalf("%d attempts", n)
	}
	if evs := e.events(t); len(evs) != 1 || evs[0].Kind != notify.EventFailed {
		t.Fatalf("activity feed: %+v", evs)
	}
}

// The ntfy preset posts the text with a title header to the topic URL.
func TestNtfyPreset(t *testing.T) {
	e := newEnv(t, notify.PresetNtfy)
	if err := e.sender.Test(context.Background(), notify.Settings{URL: e.url, Preset: notify.PresetNtfy}); err != nil {
		t.Fatal(err)
	}
	r := e.hook.requests[0]
	if r.URL.Path != "/topic" || r.Header.Get("Title") != "tunnelsvc test notification" || !strings.Contains(e.hook.bodies[0], "test") ||
		!strings.HasPrefix(r.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("ntfy request: %s %v %q", r.URL.Path, r.Header, e.hook.bodies[0])
	}
	if evs := e.events(t); len(evs) != 1 || evs[0].Kind != notify.EventSent {
		t.Fatalf("activity feed: %+v", evs)
	}
}

func register(t *testing.T, st *store.Store, name string, now time.Time) int64 {
	t.Helper()
	ctx := context.Background()
	m, err := st.RegisterMachine(ctx, store.NewMachine{Name: name, Username: "pi", SecretHash: name + "s", AgentTokenHash: name + "a",
		AgentLocalPort: 7390, SSHLocalPort: 22, Seal: func(int64) (string, error) { return "x", nil }, Now: now,
		Ports: store.PortRange{Lo: 20000, Hi: 20100}})
	if err != nil {
		t.Fatal(err)
	}
	return m.ID
}

// A machine offline for the configured minutes is reported once, not
// sooner; its return is reported too.
func TestOfflineAfterDelayAndBackOnline(t *testing.T) {
	e := newEnv(t, notify.PresetJSON)
	ctx := context.Background()
	id := register(t, e.st, "alpha", e.clock.Now())
	w := &notify.Watcher{Store: e.st, Sender: e.sender, Now: e.clock.Now}
	e.st.SetMachineStatus(ctx, id, "online", e.clock.Now())
	w.Check(ctx) // learns the state
	e.st.SetMachineStatus(ctx, id, "offline", e.clock.Now())
	e.clock.Add(4*time.Minute + 59*time.Second)
	w.Check(ctx)
	e.sender.Wait()
	if k := e.hook.kinds(); len(k) != 0 {
		t.Fatalf("notified before the 5 minutes: %v", k)
	}
	e.clock.Add(time.Second)
	w.Check(ctx)
	e.clock.Add(time.Minute)
	w.Check(ctx) // once only
	e.sender.Wait()
	if k := e.hook.kinds(); len(k) != 1 || k[0] != notify.KindMachineOffline {
		t.Fatalf("after 5 minutes offline: %v", k)
	}
	e.st.SetMachineStatus(ctx, id, "online", e.clock.Now())
	w.Check(ctx)
	e.sender.Wait()
	if k := e.hook.kinds(); len(k) != 2 || k[1] != notify.KindMachineOnline {
		t.Fatalf("back online: %v", k)
	}
}

// A machine already offline when the daemon starts is not news.
func TestOfflineBeforeStartIsNotRepeated(t *testing.T) {
	e := newEnv(t, notify.PresetJSON)
	ctx := context.Background()
	id := register(t, e.st, "beta", e.clock.Now())
	e.st.SetMachineStatus(ctx, id, "offline", e.clock.Now().Add(-time.Hour))
	w := &notify.Watcher{Store: e.st, Sender: e.sender, Now: e.clock.Now}
	w.Check(ctx)
	w.Check(ctx)
	e.sender.Wait()
	if k := e.hook.kinds(); len(k) != 0 {
		t.Fatalf("notified of an old outage: %v", k)
	}
}

func TestNewBanIsReported(t *testing.T) {
	e := newEnv(t, notify.PresetJSON)
	ctx := context.Background()
	banned := []string{"192.0.2.1"}
	w := &notify.Watcher{Store: e.st, Sender: e.sender, Now: e.clock.Now,
		Jails: func(context.Context) ([]notify.Jail, error) {
			return []notify.Jail{{Name: "tunnelsvc", Banned: append([]string(nil), banned...)}}, nil
		}}
	w.Check(ctx) // an old ban is not news
	banned = append(banned, "198.51.100.9")
	w.Check(ctx)
	w.Check(ctx)
	e.sender.Wait()
	if k := e.hook.kinds(); len(k) != 1 || k[0] != notify.KindBanned || !strings.Contains(e.hook.bodies[0], "198.51.100.9") {
		t.Fatalf("notifications: %v %v", k, e.hook.bodies)
	}
}

func TestFailedLoginBurst(t *testing.T) {
	e := newEnv(t, notify.PresetJSON)
	ctx := context.Background()
	w := &notify.Watcher{Store: e.st, Sender: e.sender, Now: e.clock.Now, LoginFailureKinds: []string{"LOGIN_FAILED"}}
	add := func(n int, kind string) {
		for range n {
			e.st.InsertAudit(ctx, store.AuditEntry{CreatedAt: e.clock.Now().Add(-time.Minute), Kind: kind})
		}
	}
	add(notify.LoginBurst-1, "LOGIN_FAILED")
	add(5, "LOGIN_SUCCESS")
	w.Check(ctx)
	e.sender.Wait()
	if k := e.hook.kinds(); len(k) != 0 {
		t.Fatalf("notified below the threshold: %v", k)
	}
	add(1, "LOGIN_FAILED")
	w.Check(ctx)
	w.Check(ctx) // once per window
	e.sender.Wait()
	if k := e.hook.kinds(); len(k) != 1 || k[0] != notify.KindLoginBurst {
		t.Fatalf("notifications: %v", k)
	}
}

// cert is a self-signed certificate for name that expires at notAfter.
func cert(t *testing.T, name string, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: notAfter.Add(-90 * 24 * time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// A TLS server on 127.0.0.1 serves each name its certificate, as the web
// proxy does; the one that expires within 14 days is reported, once a day.
func TestCertificateExpiring(t *testing.T) {
	e := newEnv(t, notify.PresetJSON)
	ctx := context.Background()
	certs := map[string]tls.Certificate{
		"soon.example.com":  cert(t, "soon.example.com", e.clock.Now().Add(13*24*time.Hour)),
		"later.example.com": cert(t, "later.example.com", e.clock.Now().Add(15*24*time.Hour)),
	}
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		c := certs[h.ServerName]
		return &c, nil
	}}
	srv.StartTLS()
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "https://")
	w := &notify.Watcher{Store: e.st, Sender: e.sender, Now: e.clock.Now,
		Sites: func(context.Context) (string, []string, error) {
			return addr, []string{"soon.example.com", "later.example.com"}, nil
		}}
	w.Check(ctx)
	w.Check(ctx) // once a day
	e.sender.Wait()
	if k := e.hook.kinds(); len(k) != 1 || k[0] != notify.KindCertExpiring || !strings.Contains(e.hook.bodies[0], "soon.example.com") {
		t.Fatalf("notifications: %v %v", k, e.hook.bodies)
	}
	e.clock.Add(25 * time.Hour)
	w.Check(ctx)
	e.sender.Wait()
	if k := e.hook.kinds(); len(k) != 3 {
		t.Fatalf("a day later both expire within 14 days and are reported again: %v", e.hook.bodies)
	}

	// Each edge's Caddy orders its own certificates: an edge that does
	// not hold the notifications lease checks its own all the same, and
	// says which edge it is.
	e.clock.Add(25 * time.Hour)
	other := &notify.Watcher{Store: e.st, Sender: e.sender, Now: e.clock.Now, Edge: "edge-b",
		Lease: func(context.Context) int64 { return 0 },
		Sites: func(context.Context) (string, []string, error) { return addr, []string{"soon.example.com"}, nil }}
	other.Check(ctx)
	e.sender.Wait()
	if k := e.hook.kinds(); len(k) != 4 || !strings.Contains(e.hook.bodies[3], "certificate expiring: soon.example.com on edge-b") {
		t.Fatalf("an edge without the lease: %v", e.hook.bodies)
	}
}

func TestDiskLowThresholdIsTheLargerOfTheTwo(t *testing.T) {
	for _, c := range []struct{ size, want uint64 }{
		{8 << 20, 200_000_000},              // smaller than 200 MB itself
		{1_000_000_000, 200_000_000},        // 5 % is 50 MB
		{4_000_000_000, 200_000_000},        // 5 % is exactly 200 MB
		{1_000_000_000_000, 50_000_000_000}, // 5 % of 1 TB
	} {
		if got := notify.DiskLowThreshold(c.size); got != c.want {
			t.Errorf("DiskLowThreshold(%d) = %d, want %d", c.size, got, c.want)
		}
	}
}

// The data disk going low is reported once per crossing (also when it is
// low at the first check), full while low is no second report, and room
// again is reported once it is a tenth above the threshold.
func TestDataDiskLowAndBack(t *testing.T) {
	e := newEnv(t, notify.PresetJSON)
	ctx := context.Background()
	const size = 10_000_000_000 // threshold: 5 % = 500 MB
	sp := store.Space{Dir: "/var/lib/tunnelsvc", Size: size, Free: 2_000_000_000}
	w := &notify.Watcher{Store: e.st, Sender: e.sender, Now: e.clock.Now, Log: quiet,
		Space: func() (store.Space, error) { return sp, nil }}
	check := func(free uint64, full bool) []string {
		sp.Free, sp.Full = free, full
		w.Check(ctx)
		e.sender.Wait()
		return e.hook.kinds()
	}
	if k := check(2_000_000_000, false); len(k) != 0 {
		t.Fatalf("plenty of room: %v", k)
	}
	if k := check(499_000_000, false); len(k) != 1 || k[0] != notify.KindDiskLow {
		t.Fatalf("under 5 %%: %v", k)
	}
	var p notify.Payload
	json.Unmarshal([]byte(e.hook.bodies[0]), &p)
	if p.Title != "data disk almost full" || p.Message != "The data disk (/var/lib/tunnelsvc) has 499 MB free of 10 GB (5.0 %); "+
		"the warning is under 500 MB (5 % of the disk or 200 MB, whichever is larger). When it is full, logins and changes fail: free space on it." {
		t.Fatalf("low: %+v", p)
	}
	check(0, true)
	check(520_000_000, false) // over the threshold, not yet a tenth above it
	if k := e.hook.kinds(); len(k) != 1 {
		t.Fatalf("a second report while low: %v", k)
	}
	if k := check(560_000_000, false); len(k) != 2 || k[1] != notify.KindDiskOK {
		t.Fatalf("room again: %v", k)
	}
	check(600_000_000, false)
	if k := e.hook.kinds(); len(k) != 2 {
		t.Fatalf("reported again while fine: %v", k)
	}

	// Full at the first check of a new daemon (and never low by the
	// numbers: a quota, say): reported, as full.
	w = &notify.Watcher{Store: e.st, Sender: e.sender, Now: e.clock.Now, Log: quiet,
		Space: func() (store.Space, error) { return sp, nil }}
	if k := check(3_000_000_000, true); len(k) != 3 || k[2] != notify.KindDiskLow {
		t.Fatalf("full at start: %v", k)
	}
	json.Unmarshal([]byte(e.hook.bodies[2]), &p)
	if p.Title != "data disk full" {
		t.Fatalf("full: %+v", p)
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Two edges' watchers on one database, one lease: a machine that goes
// offline is reported once, by the edge holding the lease; when that edge
// stops and the other takes the lease over, the old news is not repeated
// and the return online is reported once.
func TestOnlyTheLeaseHolderReports(t *testing.T) {
	e := newEnv(t, notify.PresetJSON)
	ctx := context.Background()
	id := register(t, e.st, "alpha", e.clock.Now())
	lease := func(name string, alive *bool) func(context.Context) int64 {
		return func(ctx context.Context) int64 {
			if !*alive {
				return 0
			}
			fence, _ := e.st.LeaseFence(ctx, "notifications", name, 90*time.Second, e.clock.Now())
			return fence
		}
	}
	aUp, bUp := true, true
	a := &notify.Watcher{Store: e.st, Sender: e.sender, Now: e.clock.Now, Lease: lease("edge-a", &aUp)}
	b := &notify.Watcher{Store: e.st, Sender: e.sender, Now: e.clock.Now, Lease: lease("edge-b", &bUp)}
	e.st.SetMachineStatus(ctx, id, "online", e.clock.Now())
	a.Check(ctx)
	b.Check(ctx)
	e.st.SetMachineStatus(ctx, id, "offline", e.clock.Now())
	for range 7 {
		e.clock.Add(time.Minute)
		a.Check(ctx)
		b.Check(ctx)
	}
	e.sender.Wait()
	if k := e.hook.kinds(); len(k) != 1 || k[0] != notify.KindMachineOffline {
		t.Fatalf("two edges watching: %v", k)
	}
	aUp = false // edge A stops; B takes the lease once it expires
	for range 3 {
		e.clock.Add(time.Minute)
		b.Check(ctx)
	}
	e.sender.Wait()
	if k := e.hook.kinds(); len(k) != 1 {
		t.Fatalf("the new holder repeated old news: %v", k)
	}
	e.st.SetMachineStatus(ctx, id, "online", e.clock.Now())
	e.clock.Add(time.Minute)
	b.Check(ctx)
	e.sender.Wait()
	if k := e.hook.kinds(); len(k) != 2 || k[1] != notify.KindMachineOnline {
		t.Fatalf("back online, seen by the new holder: %v", k)
	}
	// Edge A comes back (it was frozen: its last check held the lease, and
	// it still remembers the machine offline) and takes the lease again
	// once B stops. The lease's fence moved twice since: A learns the
	// state afresh instead of reporting "online" a second time.
	bUp, aUp = false, true
	for range 3 {
		e.clock.Add(time.Minute)
		a.Check(ctx)
	}
	e.sender.Wait()
	if k := e.hook.kinds(); len(k) != 2 {
		t.Fatalf("the edge that took the lease back repeated old news: %v", k)
	}
}
