package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
)

type ctxKey int

const (
	clientKey ctxKey = iota
	// sessionKey holds the session token requireSession found live.
	sessionKey
)

// session is the live session token requireSession found ("" on routes
// without it).
func session(r *http.Request) string {
	tok, _ := r.Context().Value(sessionKey).(string)
	return tok
}

// client returns who is asking, derived once per request by withClient.
func client(r *http.Request) auth.Client {
	c, _ := r.Context().Value(clientKey).(auth.Client)
	return c
}

// withClient derives the client address (see auth.ClientAddr) and caps the
// request body.
func (s *Server) withClient(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := auth.ClientAddr(r, s.cfg.IsLocal)
		c := auth.Client{Addr: addr, Local: addr.IsValid() && s.cfg.IsLocal(addr), UserAgent: r.UserAgent()}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey, c)))
	})
}

// apiHeaders marks every API answer as private, uncacheable and not to be
// sniffed or framed.
func apiHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// guard attaches the route table's access rule a to next.
func (s *Server) guard(a access, next http.Handler) http.Handler {
	switch a {
	case public:
		return next
	case untilSetup:
		return s.requireSessionAfterSetup(next)
	case recent:
		return s.requireSession(s.requireRecentAuth(next), a)
	}
	return s.requireSession(next, a)
}

// requireSession refuses a request without a live session cookie, unless
// the route's access a takes API tokens and it carries one its scope
// allows (see withAPIToken).
func (s *Server) requireSession(next http.Handler, a access) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if uid, ok := auth.LocalPeer(r.Context()); ok && (a == read || a == write) {
			if uid != 0 {
				writeError(w, http.StatusForbidden, "the local socket answers root only: use an API token (TUNNELSVC_URL and TUNNELSVC_TOKEN)")
				return
			}
			next.ServeHTTP(w, r.WithContext(audit.WithActor(r.Context(), "root on this edge (local socket)")))
			return
		}
		tok, err := s.sessionToken(r)
		if err != nil {
			s.serveError(w, r, Internal("could not check the session", err))
			return
		}
		if tok == "" && bearer(r) != "" && s.tokens != nil {
			authed, err := s.withAPIToken(r, a)
			if err != nil {
				var limited *auth.RateLimitedError
				if errors.As(err, &limited) {
					err = loginError(w, err)
				}
				s.serveError(w, r, err)
				return
			}
			next.ServeHTTP(w, authed)
			return
		}
		if tok == "" {
			writeError(w, http.StatusUnauthorized, "authentication required")
			return
		}
		c := client(r)
		c.Session = true
		ctx := context.WithValue(context.WithValue(r.Context(), clientKey, c), sessionKey, tok)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// errRecentAuth is the answer to a sensitive change from a session that
// neither logged in nor passed a step-up within auth.RecentAuthWindow.
var errRecentAuth = Errorf(http.StatusForbidden, "recent authentication required")

// checkRecentAuth refuses, with errRecentAuth, a request whose session
// has not logged in or passed a step-up (POST /api/auth/step-up) within
// auth.RecentAuthWindow. It runs behind requireSession.
func (s *Server) checkRecentAuth(r *http.Request) error {
	ok, err := s.auth.Sessions.Recent(r.Context(), session(r))
	if err != nil {
		return Internal("could not check the session", err)
	}
	if !ok {
		return errRecentAuth
	}
	return nil
}

// requireRecentAuth runs next only for a recently authenticated session
// (sudo mode: see checkRecentAuth).
func (s *Server) requireRecentAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.checkRecentAuth(r); err != nil {
			s.serveError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requireSessionAfterSetup lets next answer without a session only while
// the service is not set up.
func (s *Server) requireSessionAfterSetup(next http.Handler) http.Handler {
	guarded := s.requireSession(next, operator)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		configured, err := s.auth.Configured(r.Context())
		if err != nil {
			s.serveError(w, r, Internal("could not read the setup state", err))
			return
		}
		if configured {
			guarded.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// maxSessionCookies bounds how many tunnel_session cookies one request may
// make us look up.
const maxSessionCookies = 8

// sessionValid reports whether any tunnel_session cookie of r names a live
// session. A page on a sibling subdomain (an HTTP tunnel) can set a
// parent-domain cookie of the same name that the browser sends first, so
// the first one alone must not decide.
func (s *Server) sessionValid(r *http.Request) (bool, error) {
	tok, err := s.sessionToken(r)
	return tok != "", err
}

// sessionToken returns the first tunnel_session cookie value of r that
// names a live session, or "".
func (s *Server) sessionToken(r *http.Request) (string, error) {
	for i, c := range r.CookiesNamed(SessionCookie) {
		if i == maxSessionCookies {
			break
		}
		ok, err := s.auth.Sessions.Valid(r.Context(), c.Value)
		if err != nil {
			return "", err
		}
		if ok {
			return c.Value, nil
		}
	}
	return "", nil
}

// clientWithSession is client(r), marked when r carries a live session (for
// the public credential routes, which requireSession does not guard).
func (s *Server) clientWithSession(r *http.Request) auth.Client {
	c := client(r)
	if ok, err := s.sessionValid(r); err == nil && ok {
		c.Session = true
	}
	return c
}

// crossOrigin refuses state-changing requests that the browser marks as
// cross-origin (Sec-Fetch-Site / Origin). Requests without those headers,
// such as curl or scripts, pass.
func crossOrigin(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "cross-origin request refused")
	}))
	return cop.Handler(next)
}

// isRebindableHost reports whether host (from the Host header) is a DNS name
// other than localhost or the configured base URL's host: a name an attacker's
// page could have pointed at this box.
func (s *Server) isRebindableHost(host string) bool {
	if h, _, err := netSplitHostPort(host); err == nil {
		host = h
	}
	if _, err := validate.IP(trimBrackets(host)); err == nil {
		return false
	}
	return host != "localhost" && (s.cfg.BaseURL == "" || host != reach.HostOf(s.cfg.BaseURL))
}
