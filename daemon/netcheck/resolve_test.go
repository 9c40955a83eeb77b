package netcheck

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// startDNS runs a DNS server on 127.0.0.1 that knows only the given A records.
func startDNS(t *testing.T, records map[string]string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := dns.NewServeMux()
	mux.HandleFunc(".", func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		name := q.Question[0].Name
		if ip, ok := records[name]; ok && q.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP(ip)})
		} else if !ok {
			m.Rcode = dns.RcodeNameError
		}
		w.WriteMsg(m)
	})
	srv := &dns.Server{PacketConn: pc, Handler: mux}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String()
}

func TestResolveAndCheckDNS(t *testing.T) {
	addr := startDNS(t, map[string]string{"router.example.test.": "192.0.2.10", "host.example.test.": "192.0.2.11"})
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
