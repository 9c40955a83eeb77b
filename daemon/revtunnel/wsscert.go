package revtunnel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

// The wss site's certificate and key, which Caddy presents to machines on
// the wss transport (under --system-root). Not frps's: a key of its own.
// The daemon writes it for root alone (it keeps no capability to give a
// file to another group); caddy.service's drop-in lets Caddy's group read
// it before Caddy starts or reloads (packaging/caddy-run prepare), as
// Caddy reads every other site's key.
const (
	WSSCertPath = "/etc/tunnelsvc/wss.crt"
	WSSKeyPath  = "/etc/tunnelsvc/wss.key"
)

// WSSCert keeps the wss site's certificate, issued by the tunnel CA for
// tunnelca.ServerName (the name frpc pins on either transport).
type WSSCert struct {
	CA                *tunnelca.Authority
	CertPath, KeyPath string
	Now               func() time.Time

	mu sync.Mutex
}

// Site renews the certificate when it must (see keepIssued) and returns
// the wss site for the Caddyfile. Its Serial changes with the
// certificate, so that a renewal changes the Caddyfile and Caddy reloads.
func (w *WSSCert) Site(ctx context.Context) (*webproxy.WSSSite, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.CA == nil {
		return nil, errors.New("no tunnel CA to issue the wss site's certificate")
	}
	ca, err := w.CA.Load(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if w.Now != nil {
		now = w.Now()
	}
	if _, err := keepIssued(ca, []string{tunnelca.ServerName}, w.CertPath, w.KeyPath, now); err != nil {
		return nil, fmt.Errorf("the wss site's certificate: %w", err)
	}
	certPEM, err := os.ReadFile(w.CertPath)
	if err != nil {
		return nil, err
	}
	cert, err := tunnelca.ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("the wss site's certificate %s: %w", w.CertPath, err)
	}
	return &webproxy.WSSSite{Name: tunnelca.ServerName, CertFile: w.CertPath, KeyFile: w.KeyPath, Serial: cert.SerialNumber.Text(16)}, nil
}
