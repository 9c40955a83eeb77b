package api

import (
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/netcheck"
)

var errBadBaseURL = errors.New("not an http(s) URL of a host name or IP address with an optional port")

// checkBaseURL returns raw if it is scheme://host[:port] and nothing else:
// scheme http or https, host a valid host name (spec §4.2 note 3) or an IP
// literal, no user, path, query or fragment. Only such a URL goes into the
// shell command the operator pastes on a machine.
func checkBaseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || strings.ContainsAny(raw, "?#") {
		return "", errBadBaseURL
	}
	host, port := u.Host, ""
	if h, p, err := net.SplitHostPort(u.Host); err == nil {
		host, port = h, p
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return "", errBadBaseURL
		}
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
		if a.Zone() != "" {
			return "", errBadBaseURL
		}
	} else if !netcheck.ValidHostname(host) {
		return "", errBadBaseURL
	}
	return u.Scheme + "://" + u.Host, nil
}

// joinCommand is the one-line join command for token, or a 400 when the
// base URL (--base-url, else the request's scheme and Host) is not valid.
func (s *Server) joinCommand(base, token string) (string, error) {
	u, err := checkBaseURL(base)
	if err != nil {
		return "", Errorf(400, "cannot build the join command: the dashboard address %q is %v; open the dashboard by its host name or IP address, or set --base-url", base, err)
	}
	return quotedJoinCommand(u, token), nil
}
