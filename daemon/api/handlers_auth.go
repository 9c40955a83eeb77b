package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/sso"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// healthz: 200 while the store answers and its disk takes writes; 503
// `degraded: database unavailable` while the database cannot be reached,
// `store unavailable` for another failure, or `data disk full: <data dir>`
// while writes fail for lack of space. The full disk is not logged here (pollers ask every
// few seconds): the notification watcher logs when it fills and frees.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	if s.health != nil {
		if err := s.health(r); err != nil {
			var full *store.FullError
			if errors.As(err, &full) {
				writeError(w, http.StatusServiceUnavailable, full.Error())
				return nil
			}
			if store.Unavailable(err) {
				// Machines, tunnels, gates and the web proxy keep working
				// from memory; only the dashboard's changes wait.
				return &Error{Status: http.StatusServiceUnavailable, Msg: "degraded: " + store.UnavailableMessage, Err: err}
			}
			return &Error{Status: http.StatusServiceUnavailable, Msg: "store unavailable", Err: err}
		}
	}
	writeData(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
	w.Write(openAPISpec)
	return nil
}

// authStatus: spec §4.1 GET /api/auth/status.
func (s *Server) authStatus(w http.ResponseWriter, r *http.Request) error {
	configured, err := s.auth.Configured(r.Context())
	if err != nil {
		return Internal("could not read the setup state", err)
	}
	authenticated, err := s.sessionValid(r)
	if err != nil {
		return Internal("could not check the session", err)
	}
	totp, err := s.auth.TOTPEnabled(r.Context())
	if err != nil {
		return Internal("could not read the 2FA state", err)
	}
	passwordless := false
	if s.totp != nil {
		if passwordless, err = s.totp.Passwordless(r.Context()); err != nil {
			return Internal("could not read the 2FA state", err)
		}
	}
	pwLogin, err := s.auth.PasswordLogin(r.Context())
	if err != nil {
		return Internal("could not read the sign-in settings", err)
	}
	out := map[string]any{"setup": configured, "authenticated": authenticated, "totp_enabled": totp, "passkey_login": passwordless, "password_login": pwLogin}
	if s.sso != nil {
		st, err := s.sso.Get(r.Context())
		if err != nil {
			return Internal("could not read the single sign-on settings", err)
		}
		if st.Enabled {
			out["sso"] = st.Name
		}
	}
	// The login page shows why single sign-on sent it back: the fixed
	// sentence of the reason's code, never text from the URL.
	if code := r.URL.Query().Get("sso_error"); code != "" {
		out["sso_error"] = sso.ReasonText(code)
	}
	writeData(w, http.StatusOK, out)
	return nil
}

type passwordBody struct {
	Password string `json:"password"`
}

// authSetup: spec §4.1 POST /api/auth/setup, §3 "Service setup".
func (s *Server) authSetup(w http.ResponseWriter, r *http.Request) error {
	var body passwordBody
	if err := decode(r, &body); err != nil {
		return err
	}
	c := client(r)
	// A local client reached through a DNS name other than localhost may be a
	// stranger's page rebinding its name to this box: it needs the code too.
	if c.Local && s.isRebindableHost(r.Host) {
		c.Local = false
	}
	token, err := s.auth.Setup(r.Context(), c, body.Password, r.Header.Get("X-Setup-Code"))
	var policy auth.PolicyError
	var limited *auth.RateLimitedError
	switch {
	case errors.As(err, &limited):
		return loginError(w, err)
	case errors.Is(err, auth.ErrAlreadyConfigured):
		return Errorf(http.StatusConflict, "already configured")
	case errors.Is(err, auth.ErrSetupCodeRequired):
		return Errorf(http.StatusForbidden, "%s", err.Error())
	case errors.As(err, &policy):
		return Errorf(http.StatusBadRequest, "%s", policy.Error())
	case err != nil && token == "":
		if configured, _ := s.auth.Configured(r.Context()); configured {
			return Internal("setup succeeded but login failed", err)
		}
		return Internal("setup failed", err)
	}
	setSessionCookie(w, r, token)
	writeData(w, http.StatusOK, message("setup complete"))
	return nil
}

// authLogin: spec §4.1 POST /api/auth/login. Only `password` is read.
func (s *Server) authLogin(w http.ResponseWriter, r *http.Request) error {
	var body passwordBody
	if err := decode(r, &body); err != nil {
		return err
	}
	res, err := s.auth.Login(r.Context(), s.clientWithSession(r), body.Password)
	if errors.Is(err, auth.ErrPasswordLoginOff) {
		return Errorf(http.StatusForbidden, "%s", s.passwordOffWords(r))
	}
	if err := loginError(w, err); err != nil {
		return err
	}
	if res.PendingToken != "" {
		// passkey: the second step may be answered with a passkey (one
		// is registered), so the dashboard offers it only then.
		writeData(w, http.StatusOK, map[string]any{"needs_2fa": true, "pending_token": res.PendingToken, "passkey": s.hasPasskey(r.Context())})
		return nil
	}
	setSessionCookie(w, r, res.SessionToken)
	writeData(w, http.StatusOK, message("logged in"))
	return nil
}

// hasPasskey says whether a passkey is registered (one may answer the
// second step of a login).
func (s *Server) hasPasskey(ctx context.Context) bool {
	if s.totp == nil {
		return false
	}
	some, err := s.totp.HasPasskey(ctx)
	return err == nil && some
}

// loginError maps the errors shared by every credential check.
func loginError(w http.ResponseWriter, err error) error {
	var limited *auth.RateLimitedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &limited):
		w.Header().Set("Retry-After", strconv.Itoa(limited.RetryAfter))
		return Errorf(http.StatusTooManyRequests, "%s", limited.Error())
	case errors.Is(err, auth.ErrInvalidPassword):
		return Errorf(http.StatusUnauthorized, "invalid password")
	case errors.Is(err, auth.ErrNotConfigured):
		return Errorf(http.StatusUnauthorized, "invalid password")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client left while its check waited for the argon2id bound.
		return Errorf(http.StatusRequestTimeout, "the request ended before it was checked")
	}
	return Internal("login failed", err)
}

// authLogout: spec §4.1 POST /api/auth/logout; always 200.
func (s *Server) authLogout(w http.ResponseWriter, r *http.Request) error {
	token, err := s.sessionToken(r)
	if err != nil {
		s.log.Error("logout: checking the session failed", "err", err)
	}
	if err := s.auth.Logout(r.Context(), client(r), token); err != nil {
		s.log.Error("logout: ending the session failed", "err", err)
	}
	clearSessionCookie(w, r)
	writeData(w, http.StatusOK, message("logged out"))
	return nil
}

// auditLimit is how many audit entries GET /api/security/logs returns.
const auditLimit = 200

func (s *Server) securityLogs(w http.ResponseWriter, r *http.Request) error {
	entries, err := s.audit.ListKind(r.Context(), auditLimit, r.URL.Query().Get("kind"))
	if errors.Is(err, audit.ErrUnknownKind) {
		return Errorf(http.StatusBadRequest, "%s", err.Error())
	}
	if err != nil {
		return Internal("could not read the audit log", err)
	}
	writeData(w, http.StatusOK, entries)
	return nil
}
