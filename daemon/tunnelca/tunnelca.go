// Package tunnelca is the daemon's own certificate authority for the tunnel
// server. frps serves a short-lived certificate this CA issued; every
// machine's frpc pins the CA, so a machine sends its secret only to a server
// that proves it holds a certificate from us. The CA's private key is sealed
// at rest like the other secrets (package seal).
package tunnelca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Lifetimes and renewal.
const (
	// RootYears is the CA certificate's lifetime.
	RootYears = 10
	// ServerLifetime is a server certificate's lifetime.
	ServerLifetime = 30 * 24 * time.Hour
	// CheckInterval is how often the daemon checks whether frps's
	// certificate must be renewed; it is renewed once less than a third of
	// its lifetime is left (10 days of 30), so a missed check or two never
	// lets it expire.
	CheckInterval = 24 * time.Hour
	// backdate covers clocks a little behind ours.
	backdate = time.Hour
)

// ServerName is the name every client config asks for (frpc's
// transport.tls.serverName) and every server certificate carries. It is a
// name under the reserved .invalid domain (RFC 6761) that no public CA
// issues and no resolver answers: trust comes from the pinned CA, and the
// name stays the same whatever host machines dial, so changing server_host
// or reaching the server under another name never breaks a machine.
const ServerName = "revtunnel-server.tunnelsvc.invalid"

// settingKey holds the CA as one JSON value, so it is created atomically.
const settingKey = "tunnel_ca"

// keyAAD binds the sealed key to its place.
var keyAAD = []byte("tunnel-ca-key")

type stored struct {
	CertPEM   string `json:"cert_pem"`
	KeySealed string `json:"key_sealed"`
}

// Authority loads (creating on first use) the CA kept in the store.
type Authority struct {
	Store  *store.Store
	Sealer *seal.Sealer
	Now    func() time.Time

	// The last record parsed and what it gave: every machine's config
	// names the CA, and opening the key and parsing both for each of
	// thousands of machines took a tenth of the daemon's processor time
	// when a fleet's configs were rendered.
	mu     sync.Mutex
	raw    string
	parsed *CA
}

func (a *Authority) now() time.Time {
	if a.Now == nil {
		return time.Now()
	}
	return a.Now()
}

// CA is the loaded authority.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     *ecdsa.PrivateKey
}

// Load returns the CA, creating it (ECDSA P-256, RootYears) the first time.
// Two daemons racing to create it end up with the same one: the first
// write wins and the other reads it back.
func (a *Authority) Load(ctx context.Context) (*CA, error) {
	raw, err := a.Store.GetSetting(ctx, settingKey)
	if errors.Is(err, store.ErrNotFound) {
		fresh, ferr := a.create()
		if ferr != nil {
			return nil, ferr
		}
		if _, err := a.Store.SetSettingIfAbsent(ctx, settingKey, fresh); err != nil {
			return nil, fmt.Errorf("store the tunnel CA: %w", err)
		}
		raw, err = a.Store.GetSetting(ctx, settingKey)
	}
	if err != nil {
		return nil, fmt.Errorf("read the tunnel CA: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.parsed != nil && raw == a.raw {
		return a.parsed, nil
	}
	ca, err := a.parse(raw)
	if err != nil {
		return nil, err
	}
	a.raw, a.parsed = raw, ca
	return ca, nil
}

func (a *Authority) create() (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	serial, err := serialNumber()
	if err != nil {
		return "", err
	}
	now := a.now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// The serial in the name tells two installations' CAs apart.
		Subject:               pkix.Name{Organization: []string{"tunnelsvc"}, CommonName: "tunnelsvc tunnel CA " + serial.Text(16)[:8]},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.AddDate(RootYears, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(stored{
		CertPEM:   string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		KeySealed: a.Sealer.Seal(keyDER, keyAAD),
	})
	return string(b), err
}

func (a *Authority) parse(raw string) (*CA, error) {
	var s stored
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return nil, fmt.Errorf("tunnel CA record: %w", err)
	}
	cert, err := ParseCert([]byte(s.CertPEM))
	if err != nil {
		return nil, fmt.Errorf("tunnel CA certificate: %w", err)
	}
	keyDER, err := a.Sealer.Open(s.KeySealed, keyAAD)
	if err != nil {
		return nil, fmt.Errorf("tunnel CA key: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("tunnel CA key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("tunnel CA key does not match its certificate")
	}
	return &CA{Cert: cert, CertPEM: []byte(s.CertPEM), key: key}, nil
}

// Fingerprint is the SHA-256 of the CA certificate, in hex.
func (c *CA) Fingerprint() string {
	sum := sha256.Sum256(c.Cert.Raw)
	return hex.EncodeToString(sum[:])
}

// Names returns the names a server certificate carries: ServerName plus
// host (a DNS name or an IP address) when set.
func Names(host string) []string {
	names := []string{ServerName}
	if h := strings.TrimSpace(host); h != "" && h != ServerName {
		names = append(names, h)
	}
	return names
}

// Issue returns a new server certificate (ServerLifetime, ECDSA P-256, for
// server authentication only) for names, and its key, both PEM.
func (c *CA) Issue(names []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"tunnelsvc"}, CommonName: ServerName},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(ServerLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip, err := netip.ParseAddr(n); err == nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	if tmpl.NotAfter.After(c.Cert.NotAfter) {
		// Never outlive the CA.
		tmpl.NotAfter = c.Cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// RenewReason says why a deployed server certificate must be replaced, or
// "" when it is good: it must parse, chain to this CA, carry exactly names,
// and have at least a third of its lifetime left.
func (c *CA) RenewReason(certPEM []byte, names []string, now time.Time) string {
	if len(certPEM) == 0 {
		return "no certificate yet"
	}
	cert, err := ParseCert(certPEM)
	if err != nil {
		return "unreadable certificate: " + err.Error()
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, DNSName: ServerName}); err != nil {
		return "certificate does not verify against the tunnel CA: " + err.Error()
	}
	if have := certNames(cert); !slices.Equal(have, sortedCopy(names)) {
		return fmt.Sprintf("certificate names %v, want %v", have, sortedCopy(names))
	}
	life := cert.NotAfter.Sub(cert.NotBefore)
	if left := cert.NotAfter.Sub(now); left < life/3 {
		return fmt.Sprintf("certificate expires %s, less than a third of its lifetime left", cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return ""
}

// ParseCert reads the first certificate of a PEM text.
func ParseCert(certPEM []byte) (*x509.Certificate, error) {
	for rest := certPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, errors.New("no PEM certificate found")
		}
		if b.Type == "CERTIFICATE" {
			return x509.ParseCertificate(b.Bytes)
		}
	}
}

func certNames(c *x509.Certificate) []string {
	out := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap().String())
		}
	}
	slices.Sort(out)
	return out
}

func sortedCopy(ns []string) []string {
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		if a, err := netip.ParseAddr(n); err == nil {
			n = a.Unmap().String()
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}
