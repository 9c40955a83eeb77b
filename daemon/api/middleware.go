package api

import (
	"context"
	"net/http"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
)

type ctxKey int

const clientKey ctxKey = iota

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

// requireSession refuses a request without a live session cookie.
func (s *Server) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, err := s.sessionValid(r)
		if err != nil {
			serveError(s.log, w, r, Internal("could not check the session", err))
			return
		}
		if !ok {
			writeError(w, http.StatusUnauthorized, "authentication required")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) sessionValid(r *http.Request) (bool, error) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return false, nil
	}
	return s.auth.Sessions.Valid(r.Context(), c.Value)
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
	return host != "localhost" && host != s.baseHost
}
