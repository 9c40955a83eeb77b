package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/totp"
)

// twoFAError maps the second factor's errors: rate limit 429 with
// Retry-After, unknown device 404, a failed verification verifyStatus (401
// at login and step-up, 400 where the spec says so), other operator errors
// 400, the rest 500.
func twoFAError(w http.ResponseWriter, err error, verifyStatus int) error {
	var limited *auth.RateLimitedError
	var te *totp.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &limited), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return loginError(w, err)
	case errors.Is(err, totp.ErrDeviceNotFound):
		return Errorf(http.StatusNotFound, "%s", err.Error())
	case errors.Is(err, auth.ErrInvalidPassword), errors.Is(err, auth.ErrNotConfigured):
		return Errorf(verifyStatus, "invalid password")
	case errors.As(err, &te) && totp.IsVerification(err):
		return Errorf(verifyStatus, "%s", te.Error())
	case errors.As(err, &te):
		return Errorf(http.StatusBadRequest, "%s", te.Error())
	}
	return Internal("2FA check failed", err)
}

type login2FABody struct {
	PendingToken string `json:"pending_token"`
	Code         string `json:"code"`
}

// login2FA: spec §4.1 POST /api/auth/login/2fa, §3 "Login" pending 2FA.
func (s *Server) login2FA(w http.ResponseWriter, r *http.Request) error {
	var body login2FABody
	if err := decode(r, &body); err != nil {
		return err
	}
	token, err := s.totp.CompleteLogin(r.Context(), s.clientWithSession(r), body.PendingToken, body.Code)
	if err := twoFAError(w, err, http.StatusUnauthorized); err != nil {
		return err
	}
	setSessionCookie(w, r, token)
	writeData(w, http.StatusOK, message("logged in"))
	return nil
}

func (s *Server) twoFAStatus(w http.ResponseWriter, r *http.Request) error {
	st, err := s.totp.Status(r.Context())
	if err != nil {
		return Internal("could not read the 2FA state", err)
	}
	writeData(w, http.StatusOK, st)
	return nil
}

// checkRecentAuthForNewDevice: adding a device to an enabled 2FA is a
// sensitive change (sudo mode); the first device is not.
func (s *Server) checkRecentAuthForNewDevice(r *http.Request) error {
	on, err := s.totp.Enabled(r.Context())
	if err != nil {
		return Internal("could not read the 2FA state", err)
	}
	if !on {
		return nil
	}
	return s.checkRecentAuth(r)
}

func (s *Server) twoFAEnroll(w http.ResponseWriter, r *http.Request) error {
	if err := s.checkRecentAuthForNewDevice(r); err != nil {
		return err
	}
	en, err := s.totp.Enroll(r.Context(), r.Host)
	if err != nil {
		return Internal("could not start the enrollment", err)
	}
	writeData(w, http.StatusOK, en)
	return nil
}

type confirmBody struct {
	Code string `json:"code"`
	Name string `json:"name"`
}

func (s *Server) twoFAConfirm(w http.ResponseWriter, r *http.Request) error {
	if err := s.checkRecentAuthForNewDevice(r); err != nil {
		return err
	}
	var body confirmBody
	if err := decode(r, &body); err != nil {
		return err
	}
	codes, err := s.totp.Confirm(r.Context(), client(r), body.Code, body.Name)
	return writeDeviceAdded(w, codes, err, "device added")
}

// writeDeviceAdded answers the enrollment of a second-factor device: the
// backup codes (once) when it turned 2FA on, else added.
func writeDeviceAdded(w http.ResponseWriter, codes []string, err error, added string) error {
	if err := twoFAError(w, err, http.StatusBadRequest); err != nil {
		return err
	}
	if codes != nil {
		writeData(w, http.StatusOK, map[string]any{
			"message":      "2FA enabled; store the backup codes now: they are shown only once",
			"backup_codes": codes,
		})
		return nil
	}
	writeData(w, http.StatusOK, message(added))
	return nil
}

type codeBody struct {
	Code string `json:"code"`
}

func (s *Server) twoFADisable(w http.ResponseWriter, r *http.Request) error {
	var body codeBody
	if err := decode(r, &body); err != nil {
		return err
	}
	err := s.totp.Disable(r.Context(), client(r), body.Code)
	if err := twoFAError(w, err, http.StatusBadRequest); err != nil {
		return err
	}
	writeData(w, http.StatusOK, message("2FA disabled; every device and backup code was removed"))
	return nil
}

func (s *Server) twoFARemoveDevice(w http.ResponseWriter, r *http.Request) error {
	id := mux.Vars(r)["id"]
	if id == "" {
		return Errorf(http.StatusBadRequest, "%s", totp.ErrDeviceIDRequired.Error())
	}
	var body codeBody
	if err := decode(r, &body); err != nil {
		return err
	}
	err := s.totp.RemoveDevice(r.Context(), client(r), id, body.Code)
	if err := twoFAError(w, err, http.StatusBadRequest); err != nil {
		return err
	}
	writeData(w, http.StatusOK, message("device removed"))
	return nil
}

func (s *Server) twoFARegenerate(w http.ResponseWriter, r *http.Request) error {
	var body codeBody
	if err := decode(r, &body); err != nil {
		return err
	}
	codes, err := s.totp.RegenerateBackupCodes(r.Context(), client(r), body.Code)
	if err := twoFAError(w, err, http.StatusBadRequest); err != nil {
		return err
	}
	writeData(w, http.StatusOK, map[string]any{
		"backup_codes": codes,
		"message":      "new backup codes issued; the old ones no longer work",
	})
	return nil
}

// challengeInfo: spec §4.2 GET /api/local/ssh-keys/challenge-info.
func (s *Server) challengeInfo(w http.ResponseWriter, r *http.Request) error {
	req, err := s.totp.Requirement(r.Context())
	if err != nil {
		return Internal("could not read the 2FA state", err)
	}
	writeData(w, http.StatusOK, map[string]string{"requires": req})
	return nil
}

// stepUpStatus: GET /api/auth/step-up, what a step-up asks for and until
// when this session counts as recently authenticated (sudo mode).
func (s *Server) stepUpStatus(w http.ResponseWriter, r *http.Request) error {
	return s.writeStepUp(w, r)
}

// writeStepUp answers both step-up routes: what a step-up asks for, and
// until when r's session counts as recently authenticated.
func (s *Server) writeStepUp(w http.ResponseWriter, r *http.Request) error {
	req, err := s.totp.Requirement(r.Context())
	if err != nil {
		return Internal("could not read the 2FA state", err)
	}
	until, _, err := s.auth.Sessions.RecentUntil(r.Context(), session(r))
	if err != nil {
		return Internal("could not check the session", err)
	}
	v := stepUpView(req, until, s.now())
	st, err := s.totp.Status(r.Context())
	if err != nil {
		return Internal("could not read the 2FA state", err)
	}
	passkeys := false
	for _, d := range st.Devices {
		passkeys = passkeys || d.Type == "passkey"
	}
	v["passkey"] = passkeys
	writeData(w, http.StatusOK, v)
	return nil
}

// stepUpView is the answer of both step-up routes.
func stepUpView(requires string, until, now time.Time) map[string]any {
	until = until.UTC()
	return map[string]any{
		"requires":       requires,
		"recent":         now.Before(until),
		"recent_until":   until,
		"window_seconds": int(auth.RecentAuthWindow / time.Second),
	}
}

// stepUp: POST /api/auth/step-up. A TOTP code (2FA on; backup codes do
// not count) or the password (2FA off), as for an SSH key download; when
// it is right the session counts as recently authenticated for another
// auth.RecentAuthWindow. Failures answer 401, count in the login rate
// limit and are audited as STEP_UP_FAILED.
func (s *Server) stepUp(w http.ResponseWriter, r *http.Request) error {
	var body totp.Challenge
	if err := decode(r, &body); err != nil {
		return err
	}
	if err := s.withRP(r, &body); err != nil {
		return err
	}
	c := client(r)
	if err := s.totp.StepUp(r.Context(), c, body, "sudo mode"); err != nil {
		return twoFAError(w, err, http.StatusUnauthorized)
	}
	if err := s.auth.Sessions.MarkAuthenticated(r.Context(), session(r)); err != nil {
		return Internal("could not renew the session's authentication", err)
	}
	s.record(r, auditStepUp, fmt.Sprintf("sensitive changes allowed for %d minutes", int(auth.RecentAuthWindow/time.Minute)))
	return s.writeStepUp(w, r)
}
