package probe

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

func newStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// addTunnels registers one machine with an http tunnel per subdomain and a
// tcp tunnel; it returns their ids in that order.
func addTunnels(t *testing.T, st *store.Store, subs ...string) []int64 {
	t.Helper()
	ctx := context.Background()
	ports := store.PortRange{Lo: 30000, Hi: 30100}
	m, err := st.RegisterMachine(ctx, store.NewMachine{Name: "pi", Username: "pi", SecretHash: "s", AgentTokenHash: "a",
		Seal: func(int64) (string, error) { return "sealed", nil }, Now: time.Now(), Ports: ports})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, sub := range subs {
		tn, err := st.InsertTunnel(ctx, store.Tunnel{MachineID: m.ID, Name: sub, Kind: "http", LocalPort: 80, Subdomain: sub}, ports, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tn.ID)
	}
	tn, err := st.InsertTunnel(ctx, store.Tunnel{MachineID: m.ID, Name: "db", Kind: "tcp", LocalPort: 5432}, ports, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return append(ids, tn.ID)
}

// proxy is a TLS server on loopback standing in for Caddy: it answers
// wiki.example.com and, like Caddy with a dead upstream, 502 for the rest.
func proxy(t *testing.T) (*httptest.Server, *x509.CertPool) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host == "wiki.example.com" && r.TLS != nil && r.TLS.ServerName == "wiki.example.com" {
			w.Write([]byte("wiki"))
			return
		}
		http.Error(w, "upstream gone", http.StatusBadGateway)
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	return srv, roots
}

func TestProbeUpDownAndCertificate(t *testing.T) {
	st := newStore(t)
	ids := addTunnels(t, st, "wiki", "grafana")
	srv, roots := proxy(t)
	domain := "example.com"
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	p := New(Options{Store: st, ProxyAddr: at(srv.Listener.Addr().String()), Roots: roots, Now: func() time.Time { return now },
		Domain: func(context.Context) (string, error) { return domain, nil }})
	ctx := context.Background()

	up, err := p.Probe(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	leaf := srv.Certificate()
	if up.State != "up" || up.HTTPStatus != 200 || up.Error != "" || !up.CheckedAt.Equal(now) {
		t.Fatalf("wiki = %+v", up)
	}
	// httptest's certificate: issuer O=Acme Co, names example.com and
	// *.example.com.
	if up.CertIssuer != "Acme Co" || !up.CertExpiresAt.Equal(leaf.NotAfter.UTC()) || !up.CertValid || up.CertError != "" {
		t.Fatalf("certificate = %q %v valid %v, want Acme Co %v valid", up.CertIssuer, up.CertExpiresAt, up.CertValid, leaf.NotAfter)
	}
	// Against the system roots the same certificate is not trusted: still
	// up, with its issuer, marked invalid.
	sys := New(Options{Store: st, ProxyAddr: at(srv.Listener.Addr().String()), Domain: func(context.Context) (string, error) { return domain, nil }})
	if r, err := sys.Probe(ctx, ids[0]); err != nil || r.State != "up" || r.CertValid || r.CertIssuer != "Acme Co" ||
		r.CertError != "certificate not trusted: x509: certificate signed by unknown authority" {
		t.Fatalf("untrusted certificate: %+v, %v", r, err)
	}

	down, err := p.Probe(ctx, ids[1])
	if err != nil {
		t.Fatal(err)
	}
	if down.State != "down" || down.HTTPStatus != 502 || !strings.Contains(down.Error, "502") {
		t.Fatalf("grafana = %+v", down)
	}
	// Kept in the store for the API.
	if got, err := st.TunnelProbe(ctx, ids[1]); err != nil || got.State != "down" || got.HTTPStatus != 502 {
		t.Fatalf("stored = %+v, %v", got, err)
	}

	if _, err := p.Probe(ctx, ids[2]); err != ErrNotHTTP {
		t.Fatalf("tcp tunnel: %v", err)
	}
	domain = ""
	if _, err := p.Probe(ctx, ids[0]); err != ErrNoDomain {
		t.Fatalf("no domain: %v", err)
	}
}

// TestProbeProxyNotListening: nothing on the proxy port is down, with the
// reason.
func TestProbeProxyNotListening(t *testing.T) {
	st := newStore(t)
	ids := addTunnels(t, st, "wiki")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p := New(Options{Store: st, ProxyAddr: at(addr), Domain: func(context.Context) (string, error) { return "example.com", nil }})
	res, err := p.Probe(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	// Nothing answers: no word about a certificate.
	if res.State != "down" || res.HTTPStatus != 0 || !strings.HasPrefix(res.Error, "TLS connection to the web proxy failed: ") || res.CertIssuer != "" ||
		res.CertError != "" {
		t.Fatalf("probe = %+v", res)
	}
}

func at(addr string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return addr, nil }
}

// TestStatusKickProbesWhatChanged: after a tunnel's proxy comes up, the
// background loop probes that tunnel, not every tunnel (a fleet coming
// online announces one change per machine); a Kick (a tunnel or settings
// change) probes them all.
func TestStatusKickProbesWhatChanged(t *testing.T) {
	st := newStore(t)
	ids := addTunnels(t, st, "wiki", "grafana", "photos")
	var mu sync.Mutex
	probed := map[string]int{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		probed[strings.Split(r.Host, ".")[0]]++
		mu.Unlock()
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	p := New(Options{Store: st, ProxyAddr: at(srv.Listener.Addr().String()), Every: time.Hour,
		Domain: func(context.Context) (string, error) { return "example.com", nil }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	counts := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("wiki %d, grafana %d, photos %d", probed["wiki"], probed["grafana"], probed["photos"])
	}
	wait := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); counts() != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("probes: %s, want %s", counts(), want)
			}
		}
	}
	wait("wiki 1, grafana 1, photos 1") // the round at start
	if err := st.SetTunnelStatus(context.Background(), ids[1], "online"); err != nil {
		t.Fatal(err)
	}
	p.KickStatus()
	wait("wiki 1, grafana 2, photos 1")
	// A status notice with nothing changed probes nothing.
	p.KickStatus()
	p.Kick()
	wait("wiki 2, grafana 3, photos 2")
}
