package api

import (
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
	if err := setupError(s.setup.StartInstall(req), "install"); err != nil {
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
	// The body is optional and an unparsable one is ignored (spec §4.2).
	if err := decode(r, &body); err != nil {
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Status == http.StatusRequestEntityTooLarge {
			return err
		}
		body.Domain = ""
	}
	if err := setupError(s.setup.Skip(r.Context(), body.Domain), "could not save the domain"); err != nil {
		return err
	}
	if d := strings.TrimSpace(body.Domain); d != "" {
		s.record(r, auditSettingsChanged, fmt.Sprintf("set-up skipped; domain set to %q", strings.ToLower(d)))
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
	if err := setupError(s.setup.SetDashboardPrivate(r.Context(), *body.DashboardPrivate), "could not apply the setting"); err != nil {
		return err
	}
	s.record(r, auditSettingsChanged, fmt.Sprintf("dashboard_private set to %t", *body.DashboardPrivate))
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
	ip, err := s.setup.SetBindIP(r.Context(), *body.BindIP)
	if err := setupError(err, "could not apply the bind address"); err != nil {
		return err
	}
	if ip == "" {
		s.record(r, auditSettingsChanged, "bind_ip cleared")
	} else {
		s.record(r, auditSettingsChanged, fmt.Sprintf("bind_ip set to %s", ip))
	}
	writeData(w, http.StatusOK, map[string]string{
		"bind_ip": ip,
		"message": "tunnel and proxy configuration updated; restart the dashboard (systemctl restart tunnelsvc) for it to take effect there",
	})
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
