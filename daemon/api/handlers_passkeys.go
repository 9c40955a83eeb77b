package api

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/totp"
)

// relyingParty is who passkeys are for: router.<domain>, the dashboard's
// one name. A passkey is bound to it, so one made at another name (the
// SSH forward on 127.0.0.1, the VPS's address) would stop working the
// day the dashboard is opened by its name: refused with the reason.
// The origin is the request's, scheme by secureRequest.
func (s *Server) relyingParty(r *http.Request) (totp.RP, error) {
	domain, err := localsetup.Settings{Store: s.auth.Store}.Domain(r.Context())
	if err != nil {
		return totp.RP{}, Internal("could not read the domain", err)
	}
	if domain == "" {
		return totp.RP{}, Errorf(http.StatusBadRequest, "passkeys need the dashboard's domain: install with a domain first, then open https://router.<domain>")
	}
	id := "router." + domain
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if !strings.EqualFold(host, id) {
		return totp.RP{}, Errorf(http.StatusBadRequest, "passkeys work only at https://%s, the dashboard's own name: this page was opened as %s. "+
			"Open https://%s and try again (a passkey made at another name would not work there)", id, r.Host, id)
	}
	scheme := "http"
	if secureRequest(r) {
		scheme = "https"
	}
	return totp.RP{ID: id, Origin: scheme + "://" + r.Host}, nil
}

// passkeyBegin is the answer of the begin routes: the ceremony to name in
// the finish request, and the options for the browser's WebAuthn call.
type passkeyBegin struct {
	Ceremony string `json:"ceremony"`
	Options  any    `json:"options"`
}

// passkeyRegisterBegin: POST /api/auth/passkeys/register/begin. Like a TOTP
// enrollment: the first device needs no recent sign-in, another does.
func (s *Server) passkeyRegisterBegin(w http.ResponseWriter, r *http.Request) error {
	if err := s.checkRecentAuthForNewDevice(r); err != nil {
		return err
	}
	rp, err := s.relyingParty(r)
	if err != nil {
		return err
	}
	creation, id, err := s.totp.BeginPasskey(r.Context(), rp)
	if err != nil {
		return Internal("could not start the passkey registration", err)
	}
	writeData(w, http.StatusOK, passkeyBegin{Ceremony: id, Options: creation})
	return nil
}

type passkeyFinishBody struct {
	Ceremony   string          `json:"ceremony"`
	Name       string          `json:"name"`
	Credential json.RawMessage `json:"credential"`
}

// passkeyRegisterFinish: POST /api/auth/passkeys/register/finish
// {ceremony, name, credential}: the browser's answer; the first device's
// answer carries the backup codes, once.
func (s *Server) passkeyRegisterFinish(w http.ResponseWriter, r *http.Request) error {
	if err := s.checkRecentAuthForNewDevice(r); err != nil {
		return err
	}
	var body passkeyFinishBody
	if err := decode(r, &body); err != nil {
		return err
	}
	rp, err := s.relyingParty(r)
	if err != nil {
		return err
	}
	codes, err := s.totp.FinishPasskey(r.Context(), client(r), rp, body.Ceremony, body.Name, body.Credential)
	return writeDeviceAdded(w, codes, err, "passkey added")
}

// passkeyLoginBegin: POST /api/auth/login/passkey/begin {pending_token}:
// the passkey prompt of a login whose password was right.
func (s *Server) passkeyLoginBegin(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		PendingToken string `json:"pending_token"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.PendingToken == "" {
		// A passkey alone, when passwordless sign-in is on.
		rp, err := s.relyingParty(r)
		if err != nil {
			return err
		}
		assertion, id, err := s.totp.BeginPasswordless(r.Context(), rp)
		if errors.Is(err, totp.ErrPasswordlessOff) {
			return Errorf(http.StatusBadRequest, "pending_token is required: %s", err.Error())
		}
		if err != nil {
			return Internal("could not start the passkey sign-in", err)
		}
		writeData(w, http.StatusOK, passkeyBegin{Ceremony: id, Options: assertion})
		return nil
	}
	if err := s.totp.PendingFrom(r.Context(), client(r), body.PendingToken); err != nil {
		return twoFAError(w, err, http.StatusUnauthorized)
	}
	return s.passkeyAssertionBegin(w, r, false)
}

// passkeyStepUpBegin: POST /api/auth/step-up/passkey: the passkey prompt
// of a step-up (answered with POST /api/auth/step-up {ceremony, passkey},
// or in an SSH key download's body).
func (s *Server) passkeyStepUpBegin(w http.ResponseWriter, r *http.Request) error {
	return s.passkeyAssertionBegin(w, r, true)
}

func (s *Server) passkeyAssertionBegin(w http.ResponseWriter, r *http.Request, stepUp bool) error {
	rp, err := s.relyingParty(r)
	if err != nil {
		return err
	}
	assertion, id, err := s.totp.BeginPasskeyAssertion(r.Context(), rp, stepUp)
	var te *totp.Error
	if asTOTP(err, &te) {
		return Errorf(http.StatusBadRequest, "%s", te.Error())
	}
	if err != nil {
		return Internal("could not start the passkey check", err)
	}
	writeData(w, http.StatusOK, passkeyBegin{Ceremony: id, Options: assertion})
	return nil
}

// passkeyLogin: POST /api/auth/login/passkey {pending_token, ceremony,
// credential}: the login's second step with a passkey instead of a code.
func (s *Server) passkeyLogin(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		PendingToken string          `json:"pending_token"`
		Ceremony     string          `json:"ceremony"`
		Credential   json.RawMessage `json:"credential"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	rp, err := s.relyingParty(r)
	if err != nil {
		return err
	}
	var token string
	if body.PendingToken == "" {
		token, err = s.totp.CompletePasswordless(r.Context(), client(r), rp, body.Ceremony, body.Credential)
	} else {
		token, err = s.totp.CompleteLoginWithPasskey(r.Context(), client(r), rp, body.PendingToken, body.Ceremony, body.Credential)
	}
	if err := twoFAError(w, err, http.StatusUnauthorized); err != nil {
		return err
	}
	setSessionCookie(w, r, token)
	writeData(w, http.StatusOK, message("logged in"))
	return nil
}

// withRP sets the relying party of a step-up answered by a passkey; a
// request that names none keeps the zero RP (a code or password).
func (s *Server) withRP(r *http.Request, ch *totp.Challenge) error {
	if len(ch.Passkey) == 0 {
		return nil
	}
	rp, err := s.relyingParty(r)
	ch.RP = rp
	return err
}

func asTOTP(err error, te **totp.Error) bool { return err != nil && errors.As(err, te) }

// passkeyPasswordless: PUT /api/auth/passkeys/passwordless {on}: whether a
// passkey alone signs in (off by default; on needs a passkey). A recent
// sign-in is needed.
func (s *Server) passkeyPasswordless(w http.ResponseWriter, r *http.Request) error {
	on, err := decodeOn(r)
	if err != nil {
		return err
	}
	if !on {
		if was, err := s.totp.Passwordless(r.Context()); err != nil {
			return Internal("could not read the 2FA state", err)
		} else if was {
			if err := s.keepAWayIn(r, "passwordless passkey sign-in"); err != nil {
				return err
			}
		}
	}
	if err := s.totp.SetPasswordless(r.Context(), client(r), on); err != nil {
		return twoFAError(w, err, http.StatusBadRequest)
	}
	if on {
		writeData(w, http.StatusOK, message("a passkey alone now signs in; the password and the backup codes stay the way back in"))
	} else {
		writeData(w, http.StatusOK, message("passwordless sign-in is off: the password signs in"))
	}
	return nil
}
