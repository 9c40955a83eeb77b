// Package reach answers one question, at the moment it is asked: where do
// machines reach this server? Its answers are the host machines' tunnel
// clients dial (also the host in SSH commands and in frps's certificate)
// and the base URL of the join command and of bootstrap.sh.
//
// Nothing is captured at start: every answer is worked out from the flags
// (which change only with a restart) and the stored settings as they are
// now, so a domain or server host set in the dashboard reaches the join
// command, every client config and the SSH commands at once. Every caller
// asks the Resolver; no other code chooses among these sources.
package reach

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
)

// Settings are the stored settings an answer depends on, read at every call.
type Settings struct {
	// ServerHost is the server host saved at installation ("" none).
	ServerHost string
	// Domain is the domain HTTP tunnels live under ("" none).
	Domain string
	// ProxyInstalled: the web proxy is installed and serves
	// https://router.<Domain> (DNS for router.<Domain> points here).
	ProxyInstalled bool
	// HostName is this edge's host name when it is one edge of several
	// ("" otherwise): its tunnel host when no setting or flag names one,
	// instead of router.<Domain>, which every edge serves and so names
	// none of them in particular.
	HostName string
}

// Resolver decides the addresses.
type Resolver struct {
	// BaseURL and ServerHost are --base-url and --server-host.
	BaseURL, ServerHost string
	// Settings reads the stored settings (nil: none).
	Settings func(ctx context.Context) (Settings, error)
}

// Request is how one API request reached the dashboard; it is used only
// when nothing configured answers (Resolve's last resort).
type Request struct {
	// Host is the request's host without port ("" unknown).
	Host string
	// BaseURL is the request's own scheme://host[:port].
	BaseURL string
	// Port is the dashboard port the request arrived on.
	Port string
}

// Sources, in words, of an answer (Answer.TunnelHostFrom, JoinBaseFrom).
const (
	FromServerHostFlag = "--server-host"
	FromInstall        = "the server host saved at installation"
	FromBaseURL        = "--base-url"
	FromRouter         = "router.<domain> (the web proxy is installed)"
	FromRequest        = "the address this request reached the dashboard at"
	FromHostName       = "this edge's host name (an edge of several, given no address of its own)"
)

// Answer is where machines reach this server.
type Answer struct {
	// TunnelHost is the host machines' tunnel clients dial, and the host
	// of SSH commands ("" when nothing names one).
	TunnelHost, TunnelHostFrom string
	// JoinBase is the base URL of the join command and bootstrap.sh
	// (scheme://host[:port]; "" when nothing names one).
	JoinBase, JoinBaseFrom string
	// EdgeJoinBase is the base URL a new edge joins through, which must
	// be HTTPS (it hands over the database URL and the sealing key): the
	// join base when it is HTTPS, else https://router.<domain> once the
	// web proxy is installed ("" when neither is). Machines may join over
	// plain HTTP (--base-url http://…) while edges join over HTTPS.
	EdgeJoinBase string
}

// ErrNoAddress: nothing configured says where machines reach this server.
var ErrNoAddress = errors.New("no address machines can reach this server at is known: " +
	"install the web proxy with a domain (router.<domain>), or give the server host at installation, or set --server-host (TUNNELSVC_SERVER_HOST)")

// Resolve answers from the flags and the stored settings, then, for what
// they leave open, from req (nil: no request).
//
// The tunnel host is the first valid one of: the server host saved at
// installation (the operator's latest word); --server-host; --base-url's
// host; router.<domain> once the web
// proxy is installed; the request's host.
//
// The join base URL is --base-url when it is set (JoinBase is empty when it
// is not a valid base URL: the caller refuses it), else the first valid one
// of:
// https://router.<domain> once the web proxy is installed; the tunnel host
// (when it came from a setting or a flag) on the request's dashboard port,
// over http; the request's own base URL.
func (r *Resolver) Resolve(ctx context.Context, req *Request) (Answer, error) {
	var set Settings
	if r.Settings != nil {
		var err error
		if set, err = r.Settings(ctx); err != nil {
			return Answer{}, err
		}
	}
	var a Answer
	router := ""
	if set.ProxyInstalled && set.Domain != "" {
		router = "router." + set.Domain
	}
	baseHost := ""
	if r.BaseURL != "" {
		baseHost = HostOf(r.BaseURL)
	}
	tunnelRouter := router
	if set.HostName != "" {
		tunnelRouter = ""
	}
	for _, c := range []struct{ host, from string }{
		{set.ServerHost, FromInstall},
		{r.ServerHost, FromServerHostFlag},
		{baseHost, FromBaseURL},
		{set.HostName, FromHostName},
		{tunnelRouter, FromRouter},
	} {
		if h := strings.TrimSpace(c.host); h != "" && validHost(h) {
			a.TunnelHost, a.TunnelHostFrom = h, c.from
			break
		}
	}
	switch {
	case r.BaseURL != "":
		// The operator's own word: used as it is, or refused (JoinBase
		// stays empty), never passed over for a guess.
		if b := strings.TrimSuffix(r.BaseURL, "/"); validate.BaseURL(b) == nil {
			a.JoinBase, a.JoinBaseFrom = b, FromBaseURL
		}
	case router != "" && validate.BaseURL("https://"+router) == nil:
		a.JoinBase, a.JoinBaseFrom = "https://"+router, FromRouter
	case a.TunnelHost != "" && req != nil && req.Port != "":
		if u := "http://" + net.JoinHostPort(a.TunnelHost, req.Port); validate.BaseURL(u) == nil {
			a.JoinBase, a.JoinBaseFrom = u, a.TunnelHostFrom
		}
	}
	if req != nil {
		if a.TunnelHost == "" && req.Host != "" && validHost(req.Host) {
			a.TunnelHost, a.TunnelHostFrom = req.Host, FromRequest
		}
		if a.JoinBase == "" && r.BaseURL == "" && req.BaseURL != "" && validate.BaseURL(req.BaseURL) == nil {
			a.JoinBase, a.JoinBaseFrom = req.BaseURL, FromRequest
		}
	}
	switch {
	case strings.HasPrefix(a.JoinBase, "https://"):
		a.EdgeJoinBase = a.JoinBase
	case router != "" && validate.BaseURL("https://"+router) == nil:
		a.EdgeJoinBase = "https://" + router
	}
	return a, nil
}

// TunnelHost is the host machines' tunnel clients dial, from settings and
// flags alone; ErrNoAddress when none names one.
func (r *Resolver) TunnelHost(ctx context.Context) (string, error) {
	a, err := r.Resolve(ctx, nil)
	if err != nil {
		return "", err
	}
	if a.TunnelHost == "" {
		return "", ErrNoAddress
	}
	return a.TunnelHost, nil
}

// HostOf is the host of a base URL (scheme://host[:port]), without brackets.
func HostOf(base string) string {
	s := base
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	if i := strings.IndexAny(s, "/?#"); i >= 0 {
		s = s[:i]
	}
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return strings.Trim(s, "[]")
}

func validHost(h string) bool {
	_, err := validate.Host(h)
	return err == nil
}
