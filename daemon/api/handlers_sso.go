package api

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/sso"
)

// Audit kinds of single sign-on.
const (
	auditSSOSuccess  = "LOGIN_SSO_SUCCESS"
	auditSSORefused  = "LOGIN_SSO_REFUSED"
	auditSSOSettings = "SSO_SETTINGS_CHANGED"
)

func init() { audit.RegisterFailureKind(auditSSORefused) }

var errNoSSO = Errorf(http.StatusServiceUnavailable, "single sign-on is not available on this daemon")

// ssoRedirectURI is where the provider sends the browser back: this
// dashboard's address as the request reached it. It is the redirect URI
// to register at the provider.
func ssoRedirectURI(r *http.Request) string {
	scheme := "http"
	if secureRequest(r) {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/api/auth/sso/callback"
}

// ssoGet: GET /api/auth/sso: the settings (never the secret) and the
// redirect URI to register at the provider.
func (s *Server) ssoGet(w http.ResponseWriter, r *http.Request) error {
	if s.sso == nil {
		return errNoSSO
	}
	st, err := s.sso.Get(r.Context())
	if err != nil {
		return Internal("could not read the single sign-on settings", err)
	}
	writeData(w, http.StatusOK, map[string]any{"settings": st, "redirect_uri": ssoRedirectURI(r)})
	return nil
}

// ssoPut: PUT /api/auth/sso (sudo mode).
func (s *Server) ssoPut(w http.ResponseWriter, r *http.Request) error {
	if s.sso == nil {
		return errNoSSO
	}
	var in sso.Input
	if err := decode(r, &in); err != nil {
		return err
	}
	st, err := s.sso.Put(r.Context(), in)
	var bad sso.InputError
	if errors.As(err, &bad) {
		return Errorf(http.StatusBadRequest, "%s", string(bad))
	}
	if err != nil {
		return Internal("could not save the single sign-on settings", err)
	}
	state := "off"
	if st.Enabled {
		state = "on, through " + st.Issuer
	}
	s.record(r, auditSSOSettings, "single sign-on "+state)
	writeData(w, http.StatusOK, map[string]any{"settings": st, "redirect_uri": ssoRedirectURI(r)})
	return nil
}

// ssoBack sends the browser to the login page with why the sign-in did
// not happen, in words.
func ssoBack(w http.ResponseWriter, r *http.Request, why string) {
	http.Redirect(w, r, "/#/login?sso_error="+url.QueryEscape(why), http.StatusSeeOther)
}

// ssoStart: GET /api/auth/sso/start: to the provider.
func (s *Server) ssoStart(w http.ResponseWriter, r *http.Request) error {
	if s.sso == nil {
		return errNoSSO
	}
	to, err := s.sso.Start(r.Context(), ssoRedirectURI(r), sso.PurposeDashboard, "/#/overview")
	var refusal sso.Refusal
	if errors.As(err, &refusal) {
		ssoBack(w, r, string(refusal))
		return nil
	}
	if err != nil {
		return Internal("could not start the sign-in", err)
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
	return nil
}

// ssoCallback: GET /api/auth/sso/callback: the provider's answer. An
// allowed identity gets the operator's session, and the audit log names
// it; anything else goes back to the login page with why.
func (s *Server) ssoCallback(w http.ResponseWriter, r *http.Request) error {
	if s.sso == nil {
		return errNoSSO
	}
	c := client(r)
	id, flow, err := s.sso.Callback(r.Context(), ssoRedirectURI(r), r.URL.Query())
	var refusal sso.Refusal
	if errors.As(err, &refusal) {
		s.audit.Record(r.Context(), audit.Event{Kind: auditSSORefused, Client: c.Addr, UserAgent: c.UserAgent, Detail: string(refusal)})
		ssoBack(w, r, string(refusal))
		return nil
	}
	if err != nil {
		return Internal("could not finish the sign-in", err)
	}
	token, err := s.auth.Sessions.Create(r.Context(), c.Addr.String(), c.UserAgent)
	if err != nil {
		return Internal("could not start the session", err)
	}
	s.auth.LoginSucceeded(c)
	s.audit.Record(r.Context(), audit.Event{Kind: auditSSOSuccess, Client: c.Addr, UserAgent: c.UserAgent, Detail: "signed in as " + id.Label()})
	setSessionCookie(w, r, token)
	to := flow.ReturnTo
	if to == "" {
		to = "/#/overview"
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
	return nil
}
