package testutil

import (
	"net"
	"testing"

	"github.com/miekg/dns"
)

// DNSServer runs a DNS server on 127.0.0.1 (UDP) that knows only the given
// A records (names with the trailing dot) and answers NXDOMAIN otherwise.
// It returns the server's host:port.
func DNSServer(t testing.TB, records map[string]string) string {
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
		if ip, ok := records[name]; ok && ip == "SERVFAIL" {
			m.Rcode = dns.RcodeServerFailure
		} else if ok && q.Question[0].Qtype == dns.TypeA {
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
