package api

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/gate"

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
	st, err := s.sso.Get(r.Context())
	if err != nil {
		return Internal("could not read the single sign-on settings", err)
	}
	writeData(w, http.StatusOK, map[string]any{"settings": st, "redirect_uri": ssoRedirectURI(r)})
	return nil
}

// ssoPut: PUT /api/auth/sso (sudo mode).
func (s *Server) ssoPut(w http.ResponseWriter, r *http.Request) error {
	var in sso.Input
	if err := decode(r, &in); err != nil {
		return err
	}
	if cur, err := s.sso.Get(r.Context()); err != nil {
		return Internal("could not read the single sign-on settings", err)
	} else if cur.Enabled && !in.Enabled {
		if err := s.keepAWayIn(r, "single sign-on"); err != nil {
			return err
		}
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
// not happen: a reason's code (sso.Reasons), never free text.
func ssoBack(w http.ResponseWriter, r *http.Request, reason string) {
	http.Redirect(w, r, "/#/login?sso_error="+url.QueryEscape(reason), http.StatusSeeOther)
}

// ssoStart: GET /api/auth/sso/start: to the provider, with the flow bound
// to this browser by a short-lived cookie.
func (s *Server) ssoStart(w http.ResponseWriter, r *http.Request) error {
	purpose, returnTo := sso.PurposeDashboard, "/#/overview"
	var extra []string
	if asked := r.URL.Query().Get("gate"); asked != "" {
		// A visitor of a tunnel in sso mode, sent by its gate; only a host
		// this edge serves in sso mode (never a redirect elsewhere).
		host, ok := "", false
		if s.gate != nil {
			host, ok = s.gate.SSOSite(asked)
		}
		if !ok {
			ssoBack(w, r, sso.ReasonNoSite)
			return nil
		}
		purpose, returnTo = sso.PurposeGate+host, gate.SafeNext(r.URL.Query().Get("next"))
		if s.gate.SSOWantsGroups(host) {
			extra = append(extra, "groups")
		}
	}
	to, binding, err := s.sso.Start(r.Context(), ssoRedirectURI(r), purpose, returnTo, extra...)
	var refusal *sso.Refusal
	if errors.As(err, &refusal) {
		s.ssoRefused(r, refusal)
		ssoBack(w, r, refusal.Code)
		return nil
	}
	if err != nil {
		return Internal("could not start the sign-in", err)
	}
	setSSOCookie(w, r, binding, int(sso.FlowTTL.Seconds()))
	http.Redirect(w, r, to, http.StatusSeeOther)
	return nil
}

// ssoRefused audits a refused sign-in in full (the identity, the
// provider's or the network's words).
func (s *Server) ssoRefused(r *http.Request, refusal *sso.Refusal) {
	c := client(r)
	s.audit.Record(r.Context(), audit.Event{Kind: auditSSORefused, Client: c.Addr, UserAgent: c.UserAgent, Detail: refusal.Detail})
}

// ssoCallback: GET /api/auth/sso/callback: the provider's answer, in the
// browser that started the sign-in. An allowed identity gets the
// operator's session, or, with 2FA enrolled, goes on to the second-factor
// step as a password does; the audit log names it. Anything else goes
// back to the login page with the reason.
func (s *Server) ssoCallback(w http.ResponseWriter, r *http.Request) error {
	binding := ""
	if ck, err := r.Cookie(ssoCookie); err == nil {
		binding = ck.Value
	}
	clearSSOCookie(w, r)
	id, flow, err := s.sso.Callback(r.Context(), ssoRedirectURI(r), binding, r.URL.Query())
	host, toGate := strings.CutPrefix(flow.Purpose, sso.PurposeGate)
	if toGate {
		// Back to the site only while it still signs in this way.
		host, toGate = s.gate.SSOSite(host)
	}
	var refusal *sso.Refusal
	if errors.As(err, &refusal) {
		s.ssoRefused(r, refusal)
		if toGate {
			s.toGatePage(w, r, host, "login?sso_error="+url.QueryEscape(refusal.Code)+"&next="+url.QueryEscape(flow.ReturnTo))
			return nil
		}
		ssoBack(w, r, refusal.Code)
		return nil
	}
	if err != nil {
		return Internal("could not finish the sign-in", err)
	}
	if toGate {
		return s.ssoToGate(w, r, client(r), host, id, flow.ReturnTo)
	}
	if flow.Purpose != sso.PurposeDashboard {
		// A gate's sign-in whose site is gone or changed meanwhile.
		ssoBack(w, r, sso.ReasonSiteGone)
		return nil
	}
	return s.ssoSignIn(w, r, id, flow.ReturnTo)
}

// ssoSignIn signs the operator in whom the provider named: single sign-on
// is a first factor, so with 2FA enrolled the login page goes on to the
// second-factor step with a pending login, and the session (recent from
// then on) starts only when that step passes.
func (s *Server) ssoSignIn(w http.ResponseWriter, r *http.Request, id sso.Identity, returnTo string) error {
	c := client(r)
	twoFA, err := s.auth.TOTPEnabled(r.Context())
	if err != nil {
		return Internal("could not read the 2FA state", err)
	}
	if twoFA {
		pending, err := s.totp.BeginPending(r.Context(), c)
		if err != nil {
			return Internal("could not start the second-factor step", err)
		}
		s.audit.Record(r.Context(), audit.Event{Kind: auditSSOSuccess, Client: c.Addr, UserAgent: c.UserAgent,
			Detail: "the provider signed in " + id.Label() + "; the second factor is asked next"})
		passkey := "0"
		if s.hasPasskey(r.Context()) {
			passkey = "1"
		}
		http.Redirect(w, r, "/#/login?step=2fa&pending="+url.QueryEscape(pending)+"&passkey="+passkey, http.StatusSeeOther)
		return nil
	}
	token, err := s.auth.Sessions.Create(r.Context(), c.Addr.String(), c.UserAgent)
	if err != nil {
		return Internal("could not start the session", err)
	}
	s.auth.LoginSucceeded(c)
	s.audit.Record(r.Context(), audit.Event{Kind: auditSSOSuccess, Client: c.Addr, UserAgent: c.UserAgent, Detail: "signed in as " + id.Label()})
	setSessionCookie(w, r, token)
	if returnTo == "" {
		returnTo = "/#/overview"
	}
	http.Redirect(w, r, returnTo, http.StatusSeeOther)
	return nil
}

// waysIn lists how the operator can sign in besides the password: single
// sign-on (its name) and a passkey alone, when on.
func (s *Server) waysIn(r *http.Request) ([]string, error) {
	var ways []string
	if s.sso != nil {
		st, err := s.sso.Get(r.Context())
		if err != nil {
			return nil, err
		}
		if st.Enabled {
			ways = append(ways, "sign in with "+st.Name)
		}
	}
	if s.totp != nil {
		on, err := s.totp.Passwordless(r.Context())
		if err != nil {
			return nil, err
		}
		if on {
			ways = append(ways, "sign in with a passkey")
		}
	}
	return ways, nil
}

// rootWayBack is the way back in that always remains.
const rootWayBack = "root on the VPS turns it back on with `sudo tunnelsvc reset-password`"

// passwordOffWords is the refusal of a password login while it is off.
func (s *Server) passwordOffWords(r *http.Request) string {
	ways, _ := s.waysIn(r)
	msg := "password sign-in is off"
	if len(ways) > 0 {
		msg += ": " + strings.Join(ways, " or ")
	}
	return msg + "; " + rootWayBack
}

// passwordLogin: PUT /api/auth/password-login {on} (sudo mode). Off only
// while single sign-on or a passkey alone signs in; the answer says which
// ways in remain, and the one that always does (root's reset-password).
func (s *Server) passwordLogin(w http.ResponseWriter, r *http.Request) error {
	on, err := decodeOn(r)
	if err != nil {
		return err
	}
	ways, err := s.waysIn(r)
	if err != nil {
		return Internal("could not read the sign-in settings", err)
	}
	if !on && len(ways) == 0 {
		return Errorf(http.StatusBadRequest, "password sign-in can be turned off only while single sign-on or a passkey alone signs in: turn one on first")
	}
	if err := s.auth.SetPasswordLogin(r.Context(), on); err != nil {
		return Internal("could not save the sign-in settings", err)
	}
	if on {
		s.record(r, auditSSOSettings, "password sign-in turned on")
		writeData(w, http.StatusOK, message("password sign-in is on"))
		return nil
	}
	s.record(r, auditSSOSettings, "password sign-in turned off")
	writeData(w, http.StatusOK, message("password sign-in is off; ways in: "+strings.Join(ways, ", ")+"; and "+rootWayBack))
	return nil
}

// keepAWayIn refuses to turn off what (single sign-on, or passwordless
// passkey sign-in) while the password does not sign in and it is the
// last other way in.
func (s *Server) keepAWayIn(r *http.Request, what string) error {
	pw, err := s.auth.PasswordLogin(r.Context())
	if err != nil || pw {
		return err
	}
	ways, err := s.waysIn(r)
	if err != nil {
		return Internal("could not read the sign-in settings", err)
	}
	if len(ways) <= 1 {
		return Errorf(http.StatusBadRequest, "%s is the only way in while password sign-in is off: turn password sign-in on first", what)
	}
	return nil
}

// toGatePage sends the browser to a gate page (rest: after the gate's
// prefix) on the tunnel's host, with this request's scheme and port.
func (s *Server) toGatePage(w http.ResponseWriter, r *http.Request, host, rest string) {
	scheme := "http"
	if secureRequest(r) {
		scheme = "https"
	}
	port := ""
	if _, p, err := net.SplitHostPort(r.Host); err == nil {
		port = ":" + p
	}
	http.Redirect(w, r, scheme+"://"+host+port+gate.Prefix+rest, http.StatusSeeOther)
}

// ssoToGate hands a visitor the provider signed in to the gate of the
// tunnel host (sso mode): a one-time code when the tunnel's list lets
// them in, else the gate's page with why. Audited under their identity.
func (s *Server) ssoToGate(w http.ResponseWriter, r *http.Request, c auth.Client, host string, id sso.Identity, next string) error {
	code, siteHost, err := s.gate.IssueSSOCode(host, id.Email, id.Groups)
	switch {
	case errors.Is(err, gate.ErrSSONotAllowed):
		why := id.Label() + " may not enter " + host + ": it is not on the site's list"
		s.audit.Record(r.Context(), audit.Event{Kind: auditSSORefused, Client: c.Addr, UserAgent: c.UserAgent, Detail: why})
		s.toGatePage(w, r, host, "login?sso_error="+sso.ReasonNotAllowed+"&next="+url.QueryEscape(next))
		return nil
	case errors.Is(err, gate.ErrNotSSOSite):
		ssoBack(w, r, sso.ReasonSiteGone)
		return nil
	case err != nil:
		return Internal("could not sign in to the site", err)
	}
	s.audit.Record(r.Context(), audit.Event{Kind: auditSSOSuccess, Client: c.Addr, UserAgent: c.UserAgent, Detail: "signed in to " + siteHost + " as " + id.Label()})
	s.toGatePage(w, r, siteHost, "callback?code="+url.QueryEscape(code)+"&next="+url.QueryEscape(next))
	return nil
}

// decodeOn reads a switch's body, {"on": true|false}.
func decodeOn(r *http.Request) (bool, error) {
	var body struct {
		On *bool `json:"on"`
	}
	if err := decode(r, &body); err != nil {
		return false, err
	}
	if body.On == nil {
		return false, Errorf(http.StatusBadRequest, "on is required (true or false)")
	}
	return *body.On, nil
}
