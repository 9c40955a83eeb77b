package api

import (
	"net/http"
	"strings"

	"github.com/gorilla/mux"
)

// access says whether a route needs a session.
type access int

const (
	public access = iota
	private
)

// routes is the one route table. Every /api route names its method and its
// access; the session check is attached here, never inside a handler. The
// UI catch-all comes last and never answers /api paths.
func (s *Server) routes() http.Handler {
	r := mux.NewRouter()
	api := func(method, path string, a access, fn handlerFunc) {
		var h http.Handler = s.h(fn)
		if a == private {
			h = s.requireSession(h)
		}
		r.Handle(path, h).Methods(method)
	}

	// Liveness for systemd, load balancers and tests: 200 when the store answers.
	r.Handle("/healthz", s.h(s.healthz)).Methods(http.MethodGet, http.MethodHead)

	// API description (this table, as OpenAPI 3).
	api("GET", "/api/openapi.yaml", public, s.openAPI)

	// Session (spec §4.1, §5).
	api("GET", "/api/auth/status", public, s.authStatus)
	api("POST", "/api/auth/setup", public, s.authSetup)
	api("POST", "/api/auth/login", public, s.authLogin)
	api("POST", "/api/auth/logout", public, s.authLogout)

	// Security (spec §4.3).
	api("GET", "/api/security/logs", private, s.securityLogs)

	// Ban tool (spec §4.3). Status, config and whitelist read and write our
	// settings and our jail file; unban talks to fail2ban directly.
	api("GET", "/api/security/banner", private, s.bannerStatus)
	api("GET", "/api/security/banner/config", private, s.bannerConfig)
	api("PUT", "/api/security/banner/config", private, s.bannerSetConfig)
	api("POST", "/api/security/banner/unban", private, s.bannerUnban)
	api("POST", "/api/security/banner/whitelist", private, s.bannerWhitelistAdd)
	// {ip} may be a CIDR, so it may contain a slash.
	api("DELETE", "/api/security/banner/whitelist/{ip:.+}", private, s.bannerWhitelistDelete)
	api("DELETE", "/api/security/banner/whitelist/", private, s.bannerWhitelistDelete)
	api("DELETE", "/api/security/banner/whitelist", private, s.bannerWhitelistDelete)
	// Background; progress goes to the log stream.
	api("POST", "/api/local/setup-banner", private, s.setupBanner)

	// Firewall (spec §4.2). detect is public (spec §5.6): the setup wizard
	// shows it before a password exists.
	api("GET", "/api/local/firewall/detect", public, s.firewallDetect)
	// svc runs in the background; manual and none are saved at once.
	api("POST", "/api/local/firewall/configure", private, s.firewallConfigure)

	// Unknown API paths and methods answer in the JSON error shape.
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not found")
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
	})

	// The dashboard SPA: everything that is not the API. The API test comes
	// first: a path matcher that matched would make mux forget an earlier
	// method mismatch and answer 404 instead of 405.
	r.MatcherFunc(func(r *http.Request, _ *mux.RouteMatch) bool {
		return !isAPIPath(r.URL.Path)
	}).PathPrefix("/").Handler(s.ui)

	return s.withClient(crossOrigin(apiOnly(apiHeaders, r)))
}

func isAPIPath(p string) bool { return p == "/api" || strings.HasPrefix(p, "/api/") }

// apiOnly applies mw to /api requests and passes the rest straight to next.
func apiOnly(mw func(http.Handler) http.Handler, next http.Handler) http.Handler {
	wrapped := mw(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isAPIPath(r.URL.Path) {
			wrapped.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
