// Package validate holds the one validator of each kind of value that ends
// up in a generated file: the Caddyfile, the nftables ruleset, the fail2ban
// jail, frp's TOML and shell text. The API handlers use them to refuse bad
// input with a clear message, and every renderer calls them again on what
// it is about to write, so a value that slipped past a handler (or came from
// an old database) is refused instead of rendered.
//
// Each validator admits only characters that are plain in every one of those
// formats: letters, digits, '.', '-', ':', '/', '[', ']' and '_' where the
// kind needs them, and '~', '+', '@' inside URL paths and file paths. None admits white space, quotes, braces, '#', '%', '$',
// '\', '`', ';' or anything outside ASCII, so no accepted value can open a
// block, end a line, start a comment, expand a placeholder or a template, or
// end a quoted string. That is the property the renderers' fuzz tests check
// with the real tools.
//
// The package is a leaf: it imports only the standard library.
package validate

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strconv"
	"strings"
)

// Error is a refused value; its text says why, without repeating the value.
type Error struct{ Reason string }

func (e *Error) Error() string { return e.Reason }

func fail(format string, args ...any) error {
	return &Error{Reason: fmt.Sprintf(format, args...)}
}

// ErrZone is wrapped by the IP validators for an address with a zone
// (fe80::1%eth0): netip accepts any text after '%', so a zone can carry
// anything into a file; we never need one.
var ErrZone = errors.New("an address with a zone (%...) is not accepted")

// Limits of a hostname (spec §4.2 note 3).
const (
	MaxHostname = 253
	MaxLabel    = 63
)

// Hostname applies spec §4.2 note 3: at most 253 characters of
// dot-separated labels; each label 1 to 63 letters, digits or hyphens,
// beginning and ending with a letter or digit.
func Hostname(h string) error {
	if h == "" {
		return fail("a hostname is required")
	}
	if len(h) > MaxHostname {
		return fail("a hostname has at most %d characters", MaxHostname)
	}
	for _, l := range strings.Split(h, ".") {
		if err := Label(l); err != nil {
			return fail("not a hostname: each dot-separated label must be 1 to 63 letters, digits or inner hyphens")
		}
	}
	return nil
}

// MaxDomain leaves room for the longest label in front of the domain, so
// every <subdomain>.<domain> the proxy serves is itself a valid hostname.
const MaxDomain = MaxHostname - MaxLabel - 1

// Domain is the operator's domain: a hostname of at most MaxDomain
// characters.
func Domain(d string) error {
	if err := Hostname(d); err != nil {
		return err
	}
	if len(d) > MaxDomain {
		return fail("a domain has at most %d characters, so that <subdomain>.<domain> stays a hostname", MaxDomain)
	}
	return nil
}

// Label is one hostname label (tunnel subdomains and names): 1 to 63
// letters, digits or hyphens, beginning and ending with a letter or digit.
func Label(l string) error {
	if len(l) < 1 || len(l) > MaxLabel {
		return fail("a label has 1 to %d characters", MaxLabel)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if isAlnum(c) || c == '-' && i > 0 && i < len(l)-1 {
			continue
		}
		return fail("a label is made of letters, digits and inner hyphens")
	}
	return nil
}

// IP parses an IPv4 or IPv6 address without a zone. It returns the address
// as parsed; callers that compare addresses Unmap it.
func IP(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fail("not an IP address")
	}
	if a.Zone() != "" {
		return netip.Addr{}, &Error{Reason: ErrZone.Error()}
	}
	return a, nil
}

// IsZone reports whether err is IP's refusal of a zone.
func IsZone(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Reason == ErrZone.Error()
}

// IPOrPrefix parses an address or a CIDR (no zone) and returns its
// canonical text: the prefix masked (10.1.2.3/24 is 10.1.2.0/24) and a
// full-length prefix written as a plain address.
func IPOrPrefix(s string) (string, error) {
	if !strings.Contains(s, "/") {
		a, err := IP(s)
		if IsZone(err) {
			return "", err
		}
		if err != nil {
			return "", fail("not an address or CIDR")
		}
		return a.Unmap().String(), nil
	}
	if strings.Contains(s, "%") {
		return "", &Error{Reason: ErrZone.Error()}
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return "", fail("not an address or CIDR")
	}
	p = p.Masked()
	if p.IsSingleIP() {
		return p.Addr().Unmap().String(), nil
	}
	return p.String(), nil
}

// Host is a hostname or an IP address (no zone); it returns the canonical
// form (an address as netip prints it, a name unchanged).
func Host(s string) (string, error) {
	if a, err := IP(s); err == nil {
		return a.String(), nil
	} else if IsZone(err) {
		return "", err
	}
	if err := Hostname(s); err != nil {
		return "", fail("not a hostname or an IP address")
	}
	return s, nil
}

// Port is a TCP or UDP port number, 1 to 65535.
func Port(n int) error {
	if n < 1 || n > 65535 {
		return fail("%d is not a port (1-65535)", n)
	}
	return nil
}

// HostPort is host:port with a hostname or IP host (IPv6 in brackets).
func HostPort(s string) error {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return fail("not host:port")
	}
	host, port := s[:i], s[i+1:]
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		a, err := IP(host[1 : len(host)-1])
		if err != nil {
			return err
		}
		if !a.Is6() {
			return fail("only an IPv6 address goes in brackets")
		}
	} else if strings.Contains(host, ":") {
		return fail("an IPv6 address in host:port needs brackets")
	} else if _, err := Host(host); err != nil {
		return err
	}
	n, err := strconv.Atoi(port)
	if err != nil || strconv.Itoa(n) != port {
		return fail("not host:port: the port is not a number")
	}
	return Port(n)
}

// BaseURL is how machines reach the dashboard, as shell text and config
// carry it: http or https, a hostname or IP host (IPv6 in brackets) and an
// optional port; no path, user, query or fragment.
func BaseURL(s string) error {
	rest, ok := strings.CutPrefix(s, "https://")
	if !ok {
		if rest, ok = strings.CutPrefix(s, "http://"); !ok {
			return fail("a base URL starts with http:// or https://")
		}
	}
	if rest == "" {
		return fail("a base URL needs a host")
	}
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return fail("a base URL's IPv6 host needs a closing bracket")
		}
		if rest[end+1:] == "" {
			a, err := IP(rest[1:end])
			if err != nil {
				return err
			}
			if !a.Is6() {
				return fail("only an IPv6 address goes in brackets")
			}
			return nil
		}
		if rest[end+1] != ':' {
			return fail("a base URL is scheme://host[:port], with no path")
		}
		return HostPort(rest)
	}
	if strings.Count(rest, ":") > 1 {
		return fail("an IPv6 host in a base URL needs brackets")
	}
	if strings.Contains(rest, ":") {
		return HostPort(rest)
	}
	_, err := Host(rest)
	return err
}

// MaxURL bounds a URL or a file path written into a config file.
const MaxURL = 2048

// HTTPSURL is the https URL of a service the proxy talks to (an ACME
// directory): a host (hostname, IPv4, or IPv6 in brackets), an optional
// port and an optional path of letters, digits and . _ ~ / -; no user,
// query or fragment.
func HTTPSURL(s string) error {
	if len(s) > MaxURL {
		return fail("a URL has at most %d characters", MaxURL)
	}
	rest, ok := strings.CutPrefix(s, "https://")
	if !ok {
		return fail("the URL must start with https://")
	}
	hostport, path, _ := strings.Cut(rest, "/")
	for i := 0; i < len(path); i++ {
		if c := path[i]; !isAlnum(c) && !strings.ContainsRune("._~/-", rune(c)) {
			return fail("a URL path is made of letters, digits and . _ ~ / -")
		}
	}
	return BaseURL("https://" + hostport)
}

// AbsPath is an absolute, clean file path of letters, digits and
// . _ / + @ - (a file the proxy or a tool reads).
func AbsPath(s string) error {
	if len(s) > MaxURL {
		return fail("a path has at most %d characters", MaxURL)
	}
	if !strings.HasPrefix(s, "/") || len(s) < 2 || path.Clean(s) != s {
		return fail("not an absolute, clean path")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && !strings.ContainsRune("._/+@-", rune(c)) {
			return fail("a path is made of letters, digits and . _ / + @ -")
		}
	}
	return nil
}

// Token is a secret the daemon generated (bootstrap tokens, machine
// secrets, agent tokens): 16 to 256 characters of unpadded base64url.
func Token(s string) error {
	if len(s) < 16 || len(s) > 256 {
		return fail("a token has 16 to 256 characters")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '-' && c != '_' {
			return fail("a token is made of letters, digits, '-' and '_'")
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
