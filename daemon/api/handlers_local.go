package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/netcheck"
)

// setupError maps the local set-up errors.
func setupError(err error, what string) error {
	var in localsetup.InputError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &in):
		return Errorf(http.StatusBadRequest, "%s", in.Error())
	case errors.Is(err, localsetup.ErrBusy):
		return Errorf(http.StatusConflict, "another operation is running; follow it on the log WebSocket")
	}
	return &Error{Status: http.StatusInternalServerError, Msg: what + ": " + err.Error(), Err: err}
}

func (s *Server) localStatus(w http.ResponseWriter, r *http.Request) error {
	st, err := s.setup.Status(r.Context())
	if err != nil {
		return Internal("could not read the set-up status", err)
	}
	writeData(w, http.StatusOK, st)
	return nil
}

func (s *Server) localInstall(w http.ResponseWriter, r *http.Request) error {
	var req localsetup.InstallRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if err := setupError(s.setup.StartInstall(r.Context(), req), "install"); err != nil {
		return err
	}
	s.record(r, auditInstallStarted, fmt.Sprintf("installation started: domain %q, server host %q, skip proxy %t", req.Domain, req.ServerHost, req.SkipWebproxy))
	writeData(w, http.StatusOK, message("installation started; follow it on the log WebSocket"))
	return nil
}

func (s *Server) localSkip(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Domain string `json:"domain"`
	}
	// The body is optional and an unparsable one is ignored (spec §4.2):
	// the one body read leniently, unknown fields and all.
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return Errorf(http.StatusRequestEntityTooLarge, "request body too large (limit %d bytes)", MaxBodyBytes)
		}
		body.Domain = ""
	}
	oldDomain, err := s.setup.Settings.Domain(r.Context())
	if err != nil {
		return Internal("could not read the domain", err)
	}
	if err := setupError(s.setup.Skip(r.Context(), body.Domain), "could not save the domain"); err != nil {
		return err
	}
	if d := strings.ToLower(strings.TrimSpace(body.Domain)); d != "" && d != oldDomain {
		s.record(r, auditSettingsChanged, fmt.Sprintf("set-up skipped; domain %s → %s", quoted(oldDomain), quoted(d)))
	}
	writeData(w, http.StatusOK, message("set-up skipped"))
	return nil
}

func (s *Server) localServerPorts(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		DashboardPrivate *bool `json:"dashboard_private"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.DashboardPrivate == nil {
		return Errorf(http.StatusBadRequest, "dashboard_private is required")
	}
	was, err := s.setup.Settings.DashboardPrivate(r.Context())
	if err != nil {
		return Internal("could not read the setting", err)
	}
	if err := setupError(s.setup.SetDashboardPrivate(r.Context(), *body.DashboardPrivate), "could not apply the setting"); err != nil {
		return err
	}
	var c changes
	c.add("private dashboard", yesNo(was), yesNo(*body.DashboardPrivate))
	s.recordChanges(r, auditSettingsChanged, c)
	writeData(w, http.StatusOK, map[string]bool{"dashboard_private": *body.DashboardPrivate})
	return nil
}

func (s *Server) localBindIP(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		BindIP *string `json:"bind_ip"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.BindIP == nil {
		return Errorf(http.StatusBadRequest, "bind_ip is required (an empty string clears it)")
	}
	was, err := s.setup.Settings.BindIP(r.Context())
	if err != nil {
		return Internal("could not read the bind address", err)
	}
	ip, err := s.setup.SetBindIP(r.Context(), *body.BindIP)
	if err := setupError(err, "could not apply the bind address"); err != nil {
		return err
	}
	var c changes
	c.add("bind IP", bindWords(was), bindWords(ip))
	s.recordChanges(r, auditSettingsChanged, c)
	writeData(w, http.StatusOK, map[string]string{
		"bind_ip": ip,
		"message": "tunnel and proxy configuration updated; restart the dashboard (systemctl restart tunnelsvc) for it to take effect there",
	})
	return nil
}

// localACME: PUT /api/local/acme, where the web proxy's certificates come
// from. acme_ca is required (an empty string means Let's Encrypt again).
func (s *Server) localACME(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		CA     *string `json:"acme_ca"`
		CARoot string  `json:"acme_ca_root"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.CA == nil {
		return Errorf(http.StatusBadRequest, "acme_ca is required (an empty string means Let's Encrypt)")
	}
	was, err := s.setup.Settings.ACME(r.Context())
	if err != nil {
		return Internal("could not read the ACME CA", err)
	}
	a, err := s.setup.SetACME(r.Context(), localsetup.ACME{CA: *body.CA, CARoot: body.CARoot})
	if err := setupError(err, "could not apply the ACME CA"); err != nil {
		return err
	}
	var c changes
	c.add("ACME CA", acmeWords(was.CA), acmeWords(a.CA))
	c.add("ACME CA root", quoted(was.CARoot), quoted(a.CARoot))
	s.recordChanges(r, auditSettingsChanged, c)
	writeData(w, http.StatusOK, a)
	return nil
}

func (s *Server) resolveIP(w http.ResponseWriter, r *http.Request) error {
	host := strings.TrimSpace(r.URL.Query().Get("host"))
	if host == "" {
		return Errorf(http.StatusBadRequest, "host is required")
	}
	ip, err := s.net.ResolveIP(r.Context(), host)
	if errors.Is(err, netcheck.ErrInvalidHost) {
		return Errorf(http.StatusBadRequest, "invalid host")
	}
	if err != nil {
		return Internal("lookup failed", err)
	}
	writeData(w, http.StatusOK, map[string]string{"ip": ip})
	return nil
}

func (s *Server) checkDNS(w http.ResponseWriter, r *http.Request) error {
	domain := strings.TrimSpace(r.URL.Query().Get("domain"))
	if domain == "" {
		return Errorf(http.StatusBadRequest, "domain is required")
	}
	res, err := s.net.CheckDNS(r.Context(), domain)
	if errors.Is(err, netcheck.ErrInvalidHost) {
		return Errorf(http.StatusBadRequest, "invalid domain")
	}
	if err != nil {
		return Internal("lookup failed", err)
	}
	if res.OK {
		writeData(w, http.StatusOK, map[string]any{"ok": true, "resolved_to": res.ResolvedTo, "host": res.Host})
	} else {
		writeData(w, http.StatusOK, map[string]any{"ok": false, "message": res.Message})
	}
	return nil
}

func (s *Server) detectIP(w http.ResponseWriter, r *http.Request) error {
	ip, err := s.net.DetectIP(r.Context())
	if err != nil {
		return &Error{Status: http.StatusInternalServerError, Msg: "could not detect public IP", Err: err}
	}
	writeData(w, http.StatusOK, map[string]string{"ip": ip})
	return nil
}

// debugWebproxyFile: spec §4.4, the Caddyfile that would be deployed.
func (s *Server) debugWebproxyFile(w http.ResponseWriter, r *http.Request) error {
	b, err := s.setup.ProxyFile(r.Context())
	if errors.Is(err, localsetup.ErrNoDomain) {
		return Errorf(http.StatusNotFound, "no VPS or domain configured")
	}
	if err != nil {
		return Internal("could not render the proxy configuration", err)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write(b)
	return nil
}

// checklist: GET /api/local/checklist, the overview's getting-started list.
func (s *Server) checklist(w http.ResponseWriter, r *http.Request) error {
	set, err := s.auth.Configured(r.Context())
	if err != nil {
		return Internal("could not read the set-up state", err)
	}
	var net localsetup.NetChecks
	if s.net != nil {
		net = s.net
	}
	c, err := s.setup.Checklist(r.Context(), set, net)
	if err != nil {
		return Internal("could not work out the checklist", err)
	}
	writeData(w, http.StatusOK, c)
	return nil
}
