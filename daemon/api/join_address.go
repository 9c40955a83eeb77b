package api

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
)

// reachRequest is how r reached the dashboard, the resolver's last resort.
func (s *Server) reachRequest(r *http.Request) *reach.Request {
	return &reach.Request{Host: requestHost(r), BaseURL: s.requestBaseURL(r), Port: s.dashboardPort(r)}
}

// joinBase is the address a join command (and the bootstrap.sh it
// downloads) sends machines to: reach.Resolver's answer. The request's own
// address is often one no machine can reach (the dashboard over loopback or
// an SSH forward); when nothing configured names a better one, it is used
// and warning says what to set.
func (s *Server) joinBase(r *http.Request) (base, warning string, err error) {
	a, err := s.reach.Resolve(r.Context(), s.reachRequest(r))
	if err != nil {
		return "", "", Internal("could not read the settings", err)
	}
	if a.JoinBase == "" {
		if s.cfg.BaseURL != "" {
			return "", "", Errorf(http.StatusBadRequest, "cannot build the join command from --base-url %q: give it as scheme://host[:port]", s.cfg.BaseURL)
		}
		return "", "", Errorf(http.StatusBadRequest, "cannot build the join command from the address %q: set --base-url to the address machines use (scheme://host[:port])", s.requestBaseURL(r))
	}
	if a.JoinBaseFrom == reach.FromRequest {
		warning = "No address machines can reach is set, so this command uses " + a.JoinBase +
			", the address this page was opened at; a machine cannot join through loopback or an SSH forward. " +
			"Set --base-url (TUNNELSVC_BASE_URL), or install the web proxy with a domain (router.<domain>), or give the server host."
	}
	return a.JoinBase, warning, nil
}

// tunnelHost is where machines dial the tunnel server as r would be told.
func (s *Server) tunnelHost(ctx context.Context, r *http.Request) (string, error) {
	a, err := s.reach.Resolve(ctx, s.reachRequest(r))
	return a.TunnelHost, err
}

// requestHost is r's host without port or brackets.
func requestHost(r *http.Request) string {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.Trim(host, "[]")
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
