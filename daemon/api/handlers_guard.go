package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/banner"
	"github.com/tunnelsvc/tunnelsvc/daemon/firewall"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
)

// Progress receives the log lines of a background operation; the daemon
// connects it to the log WebSocket (spec §6). Done is called once, last.
type Progress interface {
	Line(level, text string)
	Done(ok bool)
}

// backgroundTimeout bounds a background operation started by a request.
const backgroundTimeout = 5 * time.Minute

// background runs op detached from the request (which ends at once). Its
// lines go to the log WebSocket's hub, which runs one operation at a time:
// while another runs, the request is refused with 409.
// When it ends, the audit log records how (see ended): kind names it, what
// says it in words ("ban tool set-up").
func (s *Server) background(r *http.Request, operation, kind, what string, op func(context.Context, Progress)) error {
	p, err := s.hub.Begin(operation)
	if err != nil {
		return Errorf(http.StatusConflict, "another operation is running; it shows on the Overview until it ends")
	}
	ctx, cancel := context.WithTimeout(s.life, backgroundTimeout)
	e := &ended{Progress: p, record: func(ok bool, why string) {
		c := client(r)
		ev := audit.Event{Kind: kind + "_FINISHED", Client: c.Addr, UserAgent: c.UserAgent, Detail: what + " finished"}
		if !ok {
			ev.Kind, ev.Detail = kind+"_FAILED", what+" failed"
			switch {
			case strings.Contains(why, " failed"):
				ev.Detail = why // it says what failed itself
			case why != "":
				ev.Detail += ": " + why
			}
		}
		if s.audit != nil {
			s.audit.Record(context.WithoutCancel(ctx), ev)
		}
	}}
	go func() {
		defer cancel()
		op(ctx, e)
	}()
	return nil
}

// ended is a background operation's Progress that records, when it is
// done, whether it succeeded and the last error it logged.
type ended struct {
	Progress
	mu     sync.Mutex
	last   string
	record func(ok bool, why string)
}

func (e *ended) Line(level, text string) {
	if level == "error" {
		e.mu.Lock()
		e.last = text
		e.mu.Unlock()
	}
	e.Progress.Line(level, text)
}

func (e *ended) Done(ok bool) {
	e.mu.Lock()
	why := e.last
	e.mu.Unlock()
	e.record(ok, why)
	e.Progress.Done(ok)
}

// bannerError maps the ban tool's errors: bad input is 400 with its text,
// fail2ban's refusals are 500 with fail2ban's words.
func bannerError(err error, prefix string) error {
	var bad *banner.ValidationError
	var apply *banner.ApplyError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &bad):
		return Errorf(http.StatusBadRequest, "%s", bad.Msg)
	case errors.As(err, &apply):
		return Errorf(http.StatusInternalServerError, "%s%s", prefix, apply.Msg)
	case errors.Is(err, banner.ErrNoSystemd):
		return Errorf(http.StatusInternalServerError, "%s%s", prefix, err.Error())
	}
	return Internal(strings.TrimSuffix(prefix, ": ")+" failed", err)
}

// bannerStatus: spec §4.3 GET /api/security/banner.
func (s *Server) bannerStatus(w http.ResponseWriter, r *http.Request) error {
	st, err := s.banner.Status(r.Context())
	if err != nil {
		return Errorf(http.StatusInternalServerError, "could not read the ban tool status: %v", err)
	}
	writeData(w, http.StatusOK, st)
	return nil
}

// bannerConfig: spec §4.3 GET /api/security/banner/config.
func (s *Server) bannerConfig(w http.ResponseWriter, r *http.Request) error {
	c, err := s.banner.Config(r.Context())
	if err != nil {
		return Internal("could not read the ban tool config", err)
	}
	writeData(w, http.StatusOK, c)
	return nil
}

// bannerSetConfig: spec §4.3 PUT /api/security/banner/config, §8 minimums.
func (s *Server) bannerSetConfig(w http.ResponseWriter, r *http.Request) error {
	var c banner.Config
	if err := decode(r, &c); err != nil {
		return err
	}
	was, err := s.banner.Config(r.Context())
	if err != nil {
		return Internal("could not read the ban tool config", err)
	}
	if err := s.banner.SetConfig(r.Context(), c); err != nil {
		return bannerError(err, "could not apply the ban tool config: ")
	}
	var ch changes
	ch.add("max retries", fmt.Sprint(was.MaxRetry), fmt.Sprint(c.MaxRetry))
	ch.add("find time", fmt.Sprintf("%d s", was.FindTime), fmt.Sprintf("%d s", c.FindTime))
	ch.add("ban time", fmt.Sprintf("%d s", was.BanTime), fmt.Sprintf("%d s", c.BanTime))
	s.recordChanges(r, auditBannerConfig, ch)
	writeData(w, http.StatusOK, message("ban tool config saved"))
	return nil
}

// bannerUnban: spec §4.3 POST /api/security/banner/unban.
func (s *Server) bannerUnban(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Jail string `json:"jail"`
		IP   string `json:"ip"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	jail, ip := strings.TrimSpace(body.Jail), strings.TrimSpace(body.IP)
	addr, err := s.banner.Unban(r.Context(), jail, ip)
	if err != nil {
		return bannerError(err, "unban failed: ")
	}
	s.record(r, auditBannerUnbanned, "unbanned "+addr+" in "+jail)
	writeData(w, http.StatusOK, message("unbanned "+addr+" in "+jail))
	return nil
}

// bannerWhitelistAdd: spec §4.3 POST /api/security/banner/whitelist.
func (s *Server) bannerWhitelistAdd(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		IP string `json:"ip"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	entry, added, err := s.banner.AddWhitelist(r.Context(), strings.TrimSpace(body.IP))
	if err != nil {
		return bannerError(err, "could not update the whitelist: ")
	}
	if !added {
		writeData(w, http.StatusOK, message(entry+" is already in the whitelist"))
		return nil
	}
	s.record(r, auditBannerAllowed, "added "+entry+" to the whitelist")
	writeData(w, http.StatusOK, message("added "+entry+" to the whitelist"))
	return nil
}

// bannerWhitelistDelete: spec §4.3 DELETE /api/security/banner/whitelist/{ip}.
// A CIDR's slash may come encoded (%2F) or plain.
func (s *Server) bannerWhitelistDelete(w http.ResponseWriter, r *http.Request) error {
	ip := strings.TrimSpace(mux.Vars(r)["ip"])
	if ip == "" {
		return Errorf(http.StatusBadRequest, "ip is required")
	}
	entry, err := s.banner.RemoveWhitelist(r.Context(), ip)
	if err != nil {
		return bannerError(err, "could not update the whitelist: ")
	}
	s.record(r, auditBannerDisallowed, "removed "+entry+" from the whitelist")
	writeData(w, http.StatusOK, message("removed "+entry+" from the whitelist"))
	return nil
}

// setupBanner: spec §4.2 POST /api/local/setup-banner; runs in the
// background and streams to the log.
func (s *Server) setupBanner(w http.ResponseWriter, r *http.Request) error {
	if err := s.background(r, "setup-banner", auditBannerSetupEnd, "ban tool set-up", func(ctx context.Context, p Progress) { s.banner.Setup(ctx, p) }); err != nil {
		return err
	}
	s.record(r, auditBannerSetup, "ban tool set-up started")
	writeData(w, http.StatusOK, message("ban tool set-up started; its progress shows on the Overview"))
	return nil
}

// outcome stores the result of a change made at once (the background ones
// are stored by the log hub when they end).
func (s *Server) outcome(r *http.Request, name string, ok bool, msg string) {
	if s.setup != nil {
		s.setup.RecordOutcome(r.Context(), name, ok, msg)
	}
}

// firewallDetect: spec §4.2 GET /api/local/firewall/detect (public until
// setup, §5.6). It runs nft, ufw, firewall-cmd and iptables, so its answer
// is kept for detectCacheFor and one detection runs at a time.
func (s *Server) firewallDetect(w http.ResponseWriter, r *http.Request) error {
	writeData(w, http.StatusOK, s.detect.get(r.Context(), s.now(), s.firewall.Detect))
	return nil
}

// firewallConfigure: spec §4.2 POST /api/local/firewall/configure, note 4
// and §3 "Firewall mode": svc in the background, manual and none at once.
func (s *Server) firewallConfigure(w http.ResponseWriter, r *http.Request) error {
	s.detect.forget()
	var body struct {
		Mode string `json:"mode"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if err := firewall.ValidMode(body.Mode); err != nil {
		return Errorf(http.StatusBadRequest, "%s", err.Error())
	}
	was := s.firewallMode(r)
	if body.Mode == firewall.ModeSvc {
		if err := s.background(r, "firewall", auditFirewallTakeover, "firewall takeover", func(ctx context.Context, p Progress) { s.firewall.EnterSvc(ctx, p) }); err != nil {
			return err
		}
		s.record(r, auditFirewallChanged, "firewall mode "+was+" → svc: takeover started")
		writeData(w, http.StatusOK, message("firewall takeover started; its progress shows on the Overview"))
		return nil
	}
	if err := s.firewall.SetMode(r.Context(), body.Mode); err != nil {
		var apply *firewall.ApplyError
		if errors.As(err, &apply) {
			s.outcome(r, localsetup.OutcomeFirewall, false, apply.Msg)
			return Errorf(http.StatusInternalServerError, "%s", apply.Msg)
		}
		s.outcome(r, localsetup.OutcomeFirewall, false, "could not save the firewall mode: "+err.Error())
		return Internal("could not save the firewall mode", err)
	}
	s.outcome(r, localsetup.OutcomeFirewall, true, "firewall mode set to "+body.Mode)
	var ch changes
	ch.add("firewall mode", was, body.Mode)
	s.recordChanges(r, auditFirewallChanged, ch)
	writeData(w, http.StatusOK, message("firewall mode set to "+body.Mode))
	return nil
}

// firewallMode is the saved firewall mode, for the audit log ("unknown"
// when it cannot be read).
func (s *Server) firewallMode(r *http.Request) string {
	m, err := s.firewall.Mode(r.Context())
	if err != nil {
		return "unknown"
	}
	return m
}

// firewallPlan: GET /api/local/firewall/plan, what svc mode would open and
// close now, with lock-out warnings, for the confirmation.
func (s *Server) firewallPlan(w http.ResponseWriter, r *http.Request) error {
	p, err := s.firewall.Preview(r.Context())
	if err != nil {
		return Internal("could not work out the firewall plan", err)
	}
	writeData(w, http.StatusOK, p)
	return nil
}
