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

	// Two-factor (spec §4.1). The 2FA login is public: it completes a login.
	// Changes to 2FA need a session and, except enroll/confirm, a code.
	api("POST", "/api/auth/login/2fa", public, s.login2FA)
	api("GET", "/api/auth/2fa/status", private, s.twoFAStatus)
	api("POST", "/api/auth/2fa/enroll", private, s.twoFAEnroll)
	api("POST", "/api/auth/2fa/confirm", private, s.twoFAConfirm)
	api("POST", "/api/auth/2fa/disable", private, s.twoFADisable)
	api("DELETE", "/api/auth/2fa/devices/{id}", private, s.twoFARemoveDevice)
	api("DELETE", "/api/auth/2fa/devices/", private, s.twoFARemoveDevice) // no id: 400
	api("DELETE", "/api/auth/2fa/devices", private, s.twoFARemoveDevice)  // no id: 400
	api("POST", "/api/auth/2fa/backup-codes/regenerate", private, s.twoFARegenerate)
	// What the step-up of a key download asks for (spec §4.2, §5.5).
	api("GET", "/api/local/ssh-keys/challenge-info", private, s.challengeInfo)

	// SSH keys (spec §4.2). Private keys leave only through download, after
	// a step-up check (spec §5.5).
	api("GET", "/api/local/ssh-keys", private, s.sshKeysList)
	api("POST", "/api/local/ssh-keys/generate", private, s.sshKeysGenerate)
	api("POST", "/api/local/ssh-keys/upload", private, s.sshKeysUpload)
	api("DELETE", "/api/local/ssh-keys/{id}", private, s.sshKeyDelete)
	api("PUT", "/api/local/ssh-keys/{id}/default", private, s.sshKeySetDefault)
	api("POST", "/api/local/ssh-keys/{id}/download", private, s.sshKeyDownload)

	// Security (spec §4.3).
	api("GET", "/api/security/logs", private, s.securityLogs)

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
