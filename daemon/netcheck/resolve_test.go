package netcheck

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

func TestResolveAndCheckDNS(t *testing.T) {
	addr := testutil.DNSServer(t, map[string]string{"router.example.test.": "192.0.2.10", "host.example.test.": "192.0.2.11"})
	c := &Checker{DNSServer: addr}
	ctx := context.Background()

	for host, want := range map[string]string{"host.example.test": "192.0.2.11", "203.0.113.4": "203.0.113.4", "::ffff:1.2.3.4": "::ffff:1.2.3.4", "missing.example.test": ""} {
		got, err := c.ResolveIP(ctx, host)
		if err != nil || got != want {
			t.Errorf("ResolveIP(%q) = %q, %v; want %q", host, got, err, want)
		}
	}
	if _, err := c.ResolveIP(ctx, "bad_host"); !errors.Is(err, ErrInvalidHost) {
		t.Errorf("bad host: %v", err)
	}

	r, err := c.CheckDNS(ctx, "example.test")
	if err != nil || !r.OK || r.ResolvedTo != "192.0.2.10" || r.Host != "router.example.test" {
		t.Fatalf("CheckDNS = %+v, %v", r, err)
	}
	r, err = c.CheckDNS(ctx, "nowhere.test")
	if err != nil || r.OK || r.Message != "router.nowhere.test does not resolve: add an A (or AAAA) record pointing at this server" {
		t.Fatalf("CheckDNS missing = %+v, %v", r, err)
	}
	// A failing DNS server is named, with what it did, in words.
	failing := &Checker{DNSServer: testutil.DNSServer(t, map[string]string{"router.broken.test.": "SERVFAIL"})}
	r, err = failing.CheckDNS(ctx, "broken.test")
	want := "could not look up router.broken.test: the DNS server " + failing.DNSServer + " answered with a server failure; check the domain's DNS zone, or try again later"
	if err != nil || r.OK || r.Message != want {
		t.Fatalf("CheckDNS with SERVFAIL = %+v, %v; want %q", r, err, want)
	}
	refused := &Checker{DNSServer: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}
	r, err = refused.CheckDNS(ctx, "example.test")
	want = "could not look up router.example.test: the DNS server " + refused.DNSServer + " refused the connection; check --dns-server"
	if err != nil || r.OK || r.Message != want {
		t.Fatalf("CheckDNS with nothing listening = %+v, %v; want %q", r, err, want)
	}
	if _, err := c.CheckDNS(ctx, "-bad-"); !errors.Is(err, ErrInvalidHost) {
		t.Fatalf("invalid domain: %v", err)
	}
}

// TestDetectIP: the first echo server never answers within 4 s, the second
// answers garbage, the third answers an address.
func TestDetectIP(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("<html>not an address</html>"))
	}))
	defer garbage.Close()
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("198.51.100.77\n"))
	}))
	defer good.Close()

	c := &Checker{EchoURLs: []string{slow.URL, garbage.URL, good.URL}}
	start := time.Now()
	ip, err := c.DetectIP(context.Background())
	if err != nil || ip != "198.51.100.77" {
		t.Fatalf("DetectIP = %q, %v", ip, err)
	}
	if el := time.Since(start); el < EchoTimeout {
		t.Fatalf("the slow server was not waited for (%v)", el)
	}
}

func TestDetectIPReadsAtMost64Bytes(t *testing.T) {
	// An address padded past 64 bytes is cut and no longer parses.
	padded := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("198.51.100.77" + string(make([]byte, 80))))
	}))
	defer padded.Close()
	notOK := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("198.51.100.78"))
	}))
	defer notOK.Close()
	c := &Checker{EchoURLs: []string{padded.URL, notOK.URL}}
	if ip, err := c.DetectIP(context.Background()); !errors.Is(err, ErrNoPublicIP) {
		t.Fatalf("DetectIP = %q, %v; want ErrNoPublicIP", ip, err)
	}
}

// TestResolveUnmapped: a hostname's IPv4 address is answered as IPv4, never
// in its IPv4-mapped IPv6 form (localhost came back as ::ffff:127.0.0.1).
func TestResolveUnmapped(t *testing.T) {
	// The DNS server on loopback answers only if /etc/hosts does not: no
	// query leaves the box.
	c := &Checker{DNSServer: testutil.DNSServer(t, map[string]string{"localhost.": "127.0.0.1"})}
	got, err := c.ResolveIP(context.Background(), "localhost")
	if err != nil || (got != "127.0.0.1" && got != "::1") {
		t.Errorf("ResolveIP(localhost) = %q, %v; want 127.0.0.1 or ::1", got, err)
	}
}
