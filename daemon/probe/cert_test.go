package probe

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

// issue makes a CA and a leaf for names valid from notBefore to notAfter,
// signed by it; it returns the leaf as a tls.Certificate and a pool with
// the CA.
func issue(t *testing.T, names []string, notBefore, notAfter time.Time) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{Organization: []string{"Test CA"}, CommonName: "Test Root"},
		NotBefore: notBefore.Add(-24 * time.Hour), NotAfter: notAfter.Add(365 * 24 * time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: notBefore, NotAfter: notAfter, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// tlsProxy serves cert for every name, or refuses every handshake as Caddy
// does for a name it has no certificate for when cert is nil. It answers
// 200 to a request.
func tlsProxy(t *testing.T, cert *tls.Certificate) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if cert == nil {
			return nil, errors.New("no certificate available")
		}
		return cert, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.AcceptEach(t, l, func(c net.Conn) {
		go func() {
			defer c.Close()
			buf := make([]byte, 4096)
			if _, err := c.Read(buf); err == nil {
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			}
		}()
	})
	return l.Addr().String()
}

// TestProbeCertError: the probe says what is wrong with the certificate
// the proxy serves, in words: none (the handshake refused), expired, for
// other names, not trusted, or past its renewal time; nothing for a good
// one. The site itself may still be up.
func TestProbeCertError(t *testing.T) {
	st := newStore(t)
	ids := addTunnels(t, st, "wiki")
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	const see = " (Caddy's log says why: journalctl -u caddy)"
	cases := []struct {
		name       string
		names      []string
		from, to   time.Time
		none       bool // the proxy refuses the handshake
		otherRoots bool
		want       string
	}{
		{name: "good", names: []string{"wiki.example.com"}, from: now.Add(-10 * day), to: now.Add(80 * day)},
		{name: "renewal due, within Caddy's retries", names: []string{"wiki.example.com"}, from: now.Add(-65 * day), to: now.Add(25 * day)},
		{name: "renewal overdue", names: []string{"wiki.example.com"}, from: now.Add(-80 * day), to: now.Add(10 * day),
			want: "certificate not renewed: it expires on 2026-12-03 12:00 UTC (in 10 days) and was due for renewal on 2026-11-03 12:00 UTC; the web proxy's renewals are failing" + see},
		{name: "expired", names: []string{"wiki.example.com"}, from: now.Add(-100 * day), to: now.Add(-10 * day),
			want: "certificate expired on 2026-11-13 12:00 UTC: the web proxy did not renew it" + see},
		{name: "other names", names: []string{"other.example.com"}, from: now.Add(-10 * day), to: now.Add(80 * day),
			want: "certificate for other names: x509: certificate is valid for other.example.com, not wiki.example.com"},
		{name: "not trusted", names: []string{"wiki.example.com"}, from: now.Add(-10 * day), to: now.Add(80 * day), otherRoots: true,
			want: "certificate not trusted: x509: certificate signed by unknown authority"},
		{name: "none", none: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var addr string
			var roots *x509.CertPool
			if c.none {
				addr = tlsProxy(t, nil)
			} else {
				cert, pool := issue(t, c.names, c.from, c.to)
				addr, roots = tlsProxy(t, &cert), pool
				if c.otherRoots {
					roots = x509.NewCertPool()
				}
			}
			p := New(Options{Store: st, ProxyAddr: at(addr), Roots: roots, Now: func() time.Time { return now },
				Domain: func(context.Context) (string, error) { return "example.com", nil }})
			res, err := p.Probe(context.Background(), ids[0])
			if err != nil {
				t.Fatal(err)
			}
			if c.none {
				if res.State != "down" || !strings.HasPrefix(res.CertError, "no certificate: the web proxy refused the TLS handshake for wiki.example.com (remote error: tls: ") ||
					!strings.HasSuffix(res.CertError, "); it has not obtained a certificate for this name yet, or obtaining one failed"+see) {
					t.Fatalf("probe = %+v", res)
				}
				return
			}
			if res.State != "up" || res.CertError != c.want || res.CertValid != (c.want == "" || strings.HasPrefix(c.want, "certificate not renewed")) {
				t.Fatalf("probe = %+v\nwant cert_error %q", res, c.want)
			}
			if got, err := st.TunnelProbe(context.Background(), ids[0]); err != nil || got.CertError != c.want {
				t.Fatalf("stored = %+v, %v", got, err)
			}
		})
	}
}
