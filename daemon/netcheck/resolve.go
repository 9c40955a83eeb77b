package netcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
)

// Limits from spec §4.2 notes 1 and 2.
const (
	LookupTimeout = 5 * time.Second
	EchoTimeout   = 4 * time.Second
	EchoReadBytes = 64
)

// DefaultEchoURLs are the public IP-echo services detect-ip asks, in order.
var DefaultEchoURLs = []string{
	"https://api.ipify.org",
	"https://ifconfig.me/ip",
	"https://icanhazip.com",
}

// Checker does lookups through a configurable DNS server and echo URLs, so
// tests point both at local servers.
type Checker struct {
	// DNSServer is host:port of the DNS server to ask; empty means the
	// system resolver.
	DNSServer string
	// EchoURLs are tried in order by DetectIP.
	EchoURLs []string
	// Client does the echo requests; its per-attempt timeout is EchoTimeout.
	Client *http.Client
}

func (c *Checker) resolver() *net.Resolver {
	if c.DNSServer == "" {
		return net.DefaultResolver
	}
	server := c.DNSServer
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		},
	}
}

// ErrInvalidHost is returned for a host that is neither an IP literal nor a
// valid hostname.
var ErrInvalidHost = errors.New("invalid host")

// ResolveIP returns host as parsed when it is an IP literal, else the first
// address it resolves to, or "" when the lookup fails or finds nothing.
func (c *Checker) ResolveIP(ctx context.Context, host string) (string, error) {
	if a, err := validate.IP(host); err == nil {
		return a.String(), nil
	} else if validate.IsZone(err) {
		return "", ErrInvalidHost
	}
	if !ValidHostname(host) {
		return "", ErrInvalidHost
	}
	addrs, err := c.lookup(ctx, host)
	if err != nil || len(addrs) == 0 {
		return "", nil
	}
	return addrs[0].String(), nil
}

func (c *Checker) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, LookupTimeout)
	defer cancel()
	addrs, err := c.resolver().LookupNetIP(ctx, "ip", host)
	// The resolver answers IPv4 addresses from /etc/hosts in their
	// IPv4-mapped IPv6 form (::ffff:127.0.0.1); show them as IPv4.
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs, err
}

// DNSResult is check-dns's answer.
type DNSResult struct {
	OK         bool   `json:"ok"`
	ResolvedTo string `json:"resolved_to,omitempty"`
	Host       string `json:"host,omitempty"`
	Message    string `json:"message,omitempty"`
}

// CheckDNS resolves router.<domain>, the dashboard's public name.
func (c *Checker) CheckDNS(ctx context.Context, domain string) (DNSResult, error) {
	host := "router." + domain
	if !ValidHostname(domain) || !ValidHostname(host) {
		return DNSResult{}, ErrInvalidHost
	}
	addrs, err := c.lookup(ctx, host)
	switch {
	case err != nil:
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			return DNSResult{Message: fmt.Sprintf("%s does not resolve: add an A (or AAAA) record pointing at this server", host)}, nil
		}
		if errors.As(err, &dnsErr) && dnsErr.IsTimeout {
			return DNSResult{Message: fmt.Sprintf("looking up %s timed out after %s", host, LookupTimeout)}, nil
		}
		return DNSResult{Message: c.lookupFailure(host, err)}, nil
	case len(addrs) == 0:
		return DNSResult{Message: fmt.Sprintf("%s has no address records", host)}, nil
	}
	return DNSResult{OK: true, ResolvedTo: addrs[0].String(), Host: host}, nil
}

// CheckName checks that host, one of a tunnel's own domains, reaches this
// server: it must resolve to an address router.<domain> resolves to (a
// CNAME to router.<domain> does; so does an A or AAAA record with this
// server's address). The message says what to change when it does not.
func (c *Checker) CheckName(ctx context.Context, host, domain string) (DNSResult, error) {
	router := "router." + domain
	if !ValidHostname(host) || !ValidHostname(router) {
		return DNSResult{}, ErrInvalidHost
	}
	want := fmt.Sprintf("add a CNAME record %s → %s (or an A/AAAA record with this server's address)", host, router)
	ours, err := c.lookup(ctx, router)
	if err != nil || len(ours) == 0 {
		// host is checked against router.<domain>, which must resolve
		// first.
		return DNSResult{Host: host, Message: fmt.Sprintf("%s cannot be checked yet: first add an A (or AAAA) record for %s with this server's address at your DNS provider, then %s",
			host, router, want)}, nil
	}
	addrs, err := c.lookup(ctx, host)
	switch {
	case err != nil:
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			return DNSResult{Host: host, Message: fmt.Sprintf("%s does not resolve: %s", host, want)}, nil
		}
		if errors.As(err, &dnsErr) && dnsErr.IsTimeout {
			return DNSResult{Host: host, Message: fmt.Sprintf("looking up %s timed out after %s", host, LookupTimeout)}, nil
		}
		return DNSResult{Host: host, Message: c.lookupFailure(host, err)}, nil
	case len(addrs) == 0:
		return DNSResult{Host: host, Message: fmt.Sprintf("%s has no address records: %s", host, want)}, nil
	}
	for _, a := range addrs {
		for _, o := range ours {
			if a == o {
				return DNSResult{OK: true, Host: host, ResolvedTo: a.String()}, nil
			}
		}
	}
	return DNSResult{Host: host, ResolvedTo: addrs[0].String(), Message: fmt.Sprintf("%s resolves to %s, not to this server (%s is %s): %s",
		host, addrs[0], router, ours[0], want)}, nil
}

// lookupFailure says in words why looking up host failed, for a failure
// other than "no such name" and a timeout: which server and what it did.
// The server is the one c asks (a DNSError names the system's, which
// c's dialer does not use).
func (c *Checker) lookupFailure(host string, err error) string {
	server := "the system's DNS resolver (/etc/resolv.conf)"
	reason := err.Error()
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		if dnsErr.Server != "" {
			server = "the DNS server " + dnsErr.Server
		}
		reason = dnsErr.Err
	}
	where := "the DNS servers in /etc/resolv.conf"
	if c.DNSServer != "" {
		server, where = "the DNS server "+c.DNSServer, "--dns-server"
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED) || strings.HasSuffix(reason, "connection refused"):
		return fmt.Sprintf("could not look up %s: %s refused the connection; check %s", host, server, where)
	case reason == "server misbehaving":
		return fmt.Sprintf("could not look up %s: %s answered with a server failure; check the domain's DNS zone, or try again later", host, server)
	}
	if i := strings.LastIndex(reason, ": "); i >= 0 {
		reason = reason[i+2:]
	}
	return fmt.Sprintf("could not look up %s: %s gave no answer (%s)", host, server, reason)
}

// ErrNoPublicIP is returned when no echo service gave an address.
var ErrNoPublicIP = errors.New("could not detect public IP")

// DetectIP asks each echo URL in order and returns the first address that
// one of them answers with status 200.
func (c *Checker) DetectIP(ctx context.Context) (string, error) {
	client := c.Client
	if client == nil {
		client = http.DefaultClient
	}
	urls := c.EchoURLs
	if urls == nil {
		urls = DefaultEchoURLs
	}
	for _, u := range urls {
		if ip, ok := c.echo(ctx, client, u); ok {
			return ip, nil
		}
	}
	return "", ErrNoPublicIP
}

func (c *Checker) echo(ctx context.Context, client *http.Client, url string) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, EchoTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", false
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := client.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, EchoReadBytes))
	if err != nil {
		return "", false
	}
	a, err := validate.IP(strings.TrimSpace(string(body)))
	if err != nil {
		return "", false
	}
	return a.Unmap().String(), true
}
