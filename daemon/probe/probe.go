// Package probe checks that http tunnels answer through the web proxy: it
// connects to the proxy on this box's loopback with the tunnel's name as
// SNI and Host, as a visitor's browser would, and keeps the result (up or
// down, the certificate's issuer and expiry) in the store.
package probe

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/networds"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/wakeup"
)

// Defaults.
const (
	DefaultProxyAddr = "127.0.0.1:443"
	DefaultTimeout   = 10 * time.Second
	DefaultEvery     = 5 * time.Minute
	// StatusEvery is the least time between two rounds for status
	// notices (KickStatus).
	StatusEvery = time.Second
)

// InputError is a probe that cannot be made as asked; its text is for the
// operator.
type InputError string

func (e InputError) Error() string { return string(e) }

// ProbeInputError marks it for callers that do not import this package.
func (InputError) ProbeInputError() {}

// ErrNotHTTP: only http tunnels go through the proxy.
var ErrNotHTTP error = InputError("only http tunnels are probed")

// ErrPaused: a paused tunnel has no site on the proxy to probe.
var ErrPaused error = InputError("the tunnel is paused: resume it to probe it")

// ErrNoDomain: without a domain a tunnel has no name to probe.
var ErrNoDomain error = InputError("no domain is set")

// Options configure a Prober; zero fields take the defaults.
type Options struct {
	Store *store.Store
	// ProxyAddr is where the web proxy serves HTTPS on this box (nil:
	// DefaultProxyAddr); it follows the bind address.
	ProxyAddr func(ctx context.Context) (string, error)
	// Domain is the tunnels' parent domain.
	Domain func(ctx context.Context) (string, error)
	// Roots verify the certificate (nil: the system roots).
	Roots   *x509.CertPool
	Timeout time.Duration
	Every   time.Duration
	Now     func() time.Time
	Log     *slog.Logger
}

// Prober probes tunnels on demand and, with Run, in the background.
type Prober struct {
	o    Options
	wake wakeup.Signal
	// full: the next round probes every http tunnel (Kick), not only
	// those whose proxies came up or went down (KickStatus).
	full atomic.Bool
	mu   sync.Mutex // one probe round at a time
	// seen is each tunnel's proxy status (its own and its targets') at its
	// last probe in a round.
	seen map[int64]string
}

// New returns a Prober.
func New(o Options) *Prober {
	if o.ProxyAddr == nil {
		o.ProxyAddr = func(context.Context) (string, error) { return DefaultProxyAddr, nil }
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Every == 0 {
		o.Every = DefaultEvery
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Prober{o: o, seen: map[int64]string{}}
}

// Probe checks one tunnel now and stores the result.
func (p *Prober) Probe(ctx context.Context, tunnelID int64) (store.TunnelProbe, error) {
	t, err := p.o.Store.GetTunnel(ctx, tunnelID)
	if err != nil {
		return store.TunnelProbe{}, err
	}
	if t.Kind != "http" || t.Subdomain == "" {
		return store.TunnelProbe{}, ErrNotHTTP
	}
	if t.Paused {
		return store.TunnelProbe{}, ErrPaused
	}
	domain, err := p.o.Domain(ctx)
	if err != nil {
		return store.TunnelProbe{}, err
	}
	if domain == "" {
		return store.TunnelProbe{}, ErrNoDomain
	}
	addr, err := p.o.ProxyAddr(ctx)
	if err != nil {
		return store.TunnelProbe{}, err
	}
	res := p.check(ctx, addr, t.Subdomain+"."+domain)
	res.TunnelID = t.ID
	return res, p.o.Store.SetTunnelProbe(ctx, res)
}

// Kick asks the background loop for a round of every http tunnel now
// (after a tunnel or a settings change).
func (p *Prober) Kick() {
	p.full.Store(true)
	p.wake.Notify()
}

// KickStatus asks the background loop to probe, now, the tunnels whose
// proxies (or whose targets' proxies) came up or went down since their
// last probe. A fleet coming online makes one such notice per machine: a
// round of every tunnel for each would probe the whole fleet again and
// again.
func (p *Prober) KickStatus() { p.wake.Notify() }

// Run probes every http tunnel at start, every Every and after each Kick,
// and the tunnels whose status changed after each KickStatus, until ctx
// ends.
func (p *Prober) Run(ctx context.Context) {
	t := time.NewTicker(p.o.Every)
	defer t.Stop()
	full := true
	for {
		p.round(ctx, full)
		if !full {
			// Status notices come one per machine while a fleet
			// reconnects, and each round lists every tunnel: the
			// notices of the next StatusEvery make one round.
			select {
			case <-ctx.Done():
				return
			case <-time.After(StatusEvery):
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			full = true
		case <-p.wake.C():
			full = p.full.Swap(false)
		}
	}
}

// round probes the http tunnels that are not paused: all of them when
// full, else those whose status differs from that at their last probe.
func (p *Prober) round(ctx context.Context, full bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ts, err := p.o.Store.ListTunnels(ctx, 0)
	if err != nil {
		p.o.Log.Warn("probe: listing tunnels failed", "err", err)
		return
	}
	targets, err := p.o.Store.ListTargets(ctx, 0)
	if err != nil {
		p.o.Log.Warn("probe: listing tunnel targets failed", "err", err)
		return
	}
	status := map[int64]string{}
	for _, t := range ts {
		status[t.ID] = t.Status
	}
	for _, tg := range targets {
		status[tg.TunnelID] += " " + tg.Status
	}
	for id := range p.seen {
		if _, ok := status[id]; !ok {
			delete(p.seen, id) // deleted
		}
	}
	for _, t := range ts {
		if t.Kind != "http" || t.Paused || ctx.Err() != nil {
			continue
		}
		if seen, ok := p.seen[t.ID]; !full && ok && seen == status[t.ID] {
			continue
		}
		_, err := p.Probe(ctx, t.ID)
		if err != nil && !errors.Is(err, ErrNoDomain) && !errors.Is(err, store.ErrNotFound) {
			p.o.Log.Warn("probe failed", "tunnel_id", t.ID, "err", err)
		}
		p.seen[t.ID] = status[t.ID]
	}
}

// check connects to the proxy as a visitor of host would.
func (p *Prober) check(ctx context.Context, addr, host string) store.TunnelProbe {
	res := store.TunnelProbe{State: "down", CheckedAt: p.o.Now().UTC()}
	ctx, cancel := context.WithTimeout(ctx, p.o.Timeout)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{ServerName: host,
		// The certificate is verified below, so that an invalid one is
		// reported with its issuer and expiry instead of a bare failure.
		InsecureSkipVerify: true}} //nolint:gosec
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		res.Error = "TLS connection to the web proxy failed: " + networds.Say(err)
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "remote error" {
			// The proxy answers, but refuses the handshake for this name
			// with a TLS alert (crypto/tls reports it as a "remote error"):
			// Caddy does so when it has no certificate for it.
			res.CertError = "no certificate: the web proxy refused the TLS handshake for " + host + " (" + err.Error() +
				"); it has not obtained a certificate for this name yet, or obtaining one failed" + seeProxyLog
		}
		return res
	}
	conn := raw.(*tls.Conn)
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	certs := conn.ConnectionState().PeerCertificates
	if len(certs) > 0 {
		leaf := certs[0]
		res.CertIssuer = issuer(leaf)
		res.CertExpiresAt = leaf.NotAfter.UTC()
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, verr := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: p.o.Roots, Intermediates: inter, CurrentTime: p.o.Now()})
		res.CertValid = verr == nil
		res.CertError = certProblem(leaf, verr, p.o.Now())
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+host+"/", nil)
	req.Header.Set("User-Agent", "tunnelsvc-probe")
	req.Close = true
	if err := req.Write(conn); err != nil {
		res.Error = "sending the request failed: " + networds.Say(err)
		return res
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		res.Error = "no HTTP answer: " + networds.Say(err)
		return res
	}
	resp.Body.Close()
	res.HTTPStatus = resp.StatusCode
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		res.Error = fmt.Sprintf("the proxy answered %d %s: the machine's service does not answer", resp.StatusCode, http.StatusText(resp.StatusCode))
	default:
		res.State = "up"
	}
	return res
}

// seeProxyLog is where the reason of a failed issuance or renewal is:
// Caddy's admin API does not report it, its log does.
const seeProxyLog = " (Caddy's log says why: journalctl -u caddy)"

// RenewalOverdue is how little of its lifetime a served certificate may
// have left before the probe says its renewal is failing. Caddy renews at a
// third of the lifetime left; a quarter leaves a twelfth of the lifetime
// (a week of a 90-day certificate) for retries.
const RenewalOverdue = 4

// certProblem says what is wrong with the certificate served for a name,
// in words, given the verification's outcome verr: expired, not yet
// valid, for other names, not trusted, or past its renewal time; "" when
// nothing is. Caddy tells no one why an issuance or renewal failed except
// its log, so this is what the daemon can see of it from outside.
func certProblem(leaf *x509.Certificate, verr error, now time.Time) string {
	day := func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }
	switch {
	case now.After(leaf.NotAfter):
		return "certificate expired on " + day(leaf.NotAfter) + ": the web proxy did not renew it" + seeProxyLog
	case now.Before(leaf.NotBefore):
		return "certificate not valid before " + day(leaf.NotBefore)
	case verr != nil:
		var host x509.HostnameError
		if errors.As(verr, &host) {
			return "certificate for other names: " + verr.Error()
		}
		return "certificate not trusted: " + verr.Error()
	}
	life := leaf.NotAfter.Sub(leaf.NotBefore)
	if left := leaf.NotAfter.Sub(now); life > 0 && left < life/RenewalOverdue {
		due := leaf.NotAfter.Add(-life / 3)
		return fmt.Sprintf("certificate not renewed: it expires on %s (in %s) and was due for renewal on %s; "+
			"the web proxy's renewals are failing", day(leaf.NotAfter), span(left), day(due)) + seeProxyLog
	}
	return ""
}

// span is a duration in whole days, or hours under two days.
func span(d time.Duration) string {
	if d >= 48*time.Hour {
		return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
	}
	return fmt.Sprintf("%d hours", int(d/time.Hour))
}

// issuer names a certificate's issuer: organization and common name.
func issuer(c *x509.Certificate) string {
	org := strings.Join(c.Issuer.Organization, ", ")
	cn := c.Issuer.CommonName
	switch {
	case org != "" && cn != "" && org != cn:
		return org + " (" + cn + ")"
	case org != "":
		return org
	}
	return cn
}
