package api

import (
	"net"
	"net/http"
	"strconv"
)

// joinBase is the address a join command sends machines to. The request's
// own address is often one no machine can reach (the dashboard over
// loopback or an SSH forward), so the first of these that is known wins:
//
//  1. --base-url;
//  2. https://router.<domain> once the web proxy is installed;
//  3. the server host (the install's, else --server-host) on the port this
//     request reached the dashboard at.
//
// When none is known, the request's address is used and warning says what
// to set. A router name or server host that could not be substituted
// safely into the shell command is passed over; a base URL or request
// address that could not is refused.
func (s *Server) joinBase(r *http.Request) (base, warning string, err error) {
	if s.cfg.BaseURL != "" {
		if !safeBaseURL.MatchString(s.cfg.BaseURL) {
			return "", "", Errorf(http.StatusBadRequest, "cannot build the join command from --base-url %q: give it as scheme://host[:port]", s.cfg.BaseURL)
		}
		return s.cfg.BaseURL, "", nil
	}
	serverHost := s.cfg.ServerHost
	if s.setup != nil {
		v, err := s.setup.Settings.VPS(r.Context())
		if err != nil {
			return "", "", Internal("could not read the settings", err)
		}
		if v != nil && v.Domain != "" && !v.SkipWebproxy && !v.InstalledAt.IsZero() {
			if u := "https://router." + v.Domain; safeBaseURL.MatchString(u) {
				return u, "", nil
			}
		}
		if v != nil && v.ServerHost != "" {
			serverHost = v.ServerHost
		}
	}
	if serverHost != "" {
		if u := "http://" + net.JoinHostPort(serverHost, s.dashboardPort(r)); safeBaseURL.MatchString(u) {
			return u, "", nil
		}
	}
	base = s.baseURL(r)
	if !safeBaseURL.MatchString(base) {
		return "", "", Errorf(http.StatusBadRequest, "cannot build the join command from the address %q: set --base-url to the address machines use (scheme://host[:port])", base)
	}
	return base, "No address machines can reach is set, so this command uses " + base +
		", the address this page was opened at; a machine cannot join through loopback or an SSH forward. " +
		"Set --base-url (TUNNELSVC_BASE_URL), or install the web proxy with a domain (router.<domain>), or give the server host.", nil
}

// dashboardPort is the port of the listener r arrived on, else --listen's.
func (s *Server) dashboardPort(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok && a.Port != 0 {
		return strconv.Itoa(a.Port)
	}
	if _, p, err := net.SplitHostPort(s.cfg.Listen); err == nil {
		return p
	}
	return "7380"
}
