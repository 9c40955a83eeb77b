package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/tunnelsvc/tunnelsvc/daemon/monitor"
	"github.com/tunnelsvc/tunnelsvc/daemon/notify"
)

// Monitoring is what the metrics, traffic and notification routes use.
// Every field may be nil; its routes then answer 503.
type Monitoring struct {
	// Metrics serves GET /metrics (it checks the bearer token itself).
	Metrics http.Handler
	Tokens  *monitor.Tokens
	Traffic *monitor.Traffic
	Notify  *notify.Sender
}

// Audit kinds of the monitoring settings: who opened /metrics to a
// scraper, and where notifications go, are security decisions.
const (
	KindMetricsTokenCreated = "METRICS_TOKEN_CREATED"
	KindMetricsTokenRevoked = "METRICS_TOKEN_REVOKED"
	KindNotifyChanged       = "NOTIFICATIONS_CHANGED"
)

var errNoMonitoring = Errorf(http.StatusServiceUnavailable, "monitoring is not available in this daemon")

// metricsHandler is GET /metrics: Prometheus text format, bearer token.
func (s *Server) metricsHandler(w http.ResponseWriter, r *http.Request) error {
	if s.mon.Metrics == nil {
		return errNoMonitoring
	}
	s.mon.Metrics.ServeHTTP(w, r)
	return nil
}

func (s *Server) metricsTokenStatus(w http.ResponseWriter, r *http.Request) error {
	if s.mon.Tokens == nil {
		return errNoMonitoring
	}
	st, err := s.mon.Tokens.Status(r.Context())
	if err != nil {
		return Internal("could not read the metrics token", err)
	}
	writeData(w, http.StatusOK, st)
	return nil
}

// metricsTokenCreate makes a new token (replacing the old one) and shows it once.
func (s *Server) metricsTokenCreate(w http.ResponseWriter, r *http.Request) error {
	if s.mon.Tokens == nil {
		return errNoMonitoring
	}
	was, err := s.mon.Tokens.Status(r.Context())
	if err != nil {
		return Internal("could not read the metrics token", err)
	}
	tok, st, err := s.mon.Tokens.Create(r.Context())
	if err != nil {
		return Internal("could not create the metrics token", err)
	}
	detail := "/metrics token: none → a new one"
	if was.Exists {
		detail = "/metrics token replaced by a new one (the old one no longer works)"
	}
	s.record(r, KindMetricsTokenCreated, detail)
	writeData(w, http.StatusOK, map[string]any{"token": tok, "exists": st.Exists, "created_at": st.CreatedAt,
		"message": "metrics token created; it is shown only now"})
	return nil
}

func (s *Server) metricsTokenRevoke(w http.ResponseWriter, r *http.Request) error {
	if s.mon.Tokens == nil {
		return errNoMonitoring
	}
	if err := s.mon.Tokens.Revoke(r.Context()); err != nil {
		return Internal("could not revoke the metrics token", err)
	}
	s.record(r, KindMetricsTokenRevoked, "")
	writeData(w, http.StatusOK, message("metrics token revoked"))
	return nil
}

// traffic is every machine's and tunnel's last 24 h of traffic.
func (s *Server) traffic(w http.ResponseWriter, r *http.Request) error {
	if s.mon.Traffic == nil {
		return errNoMonitoring
	}
	h, err := s.mon.Traffic.History(r.Context())
	if err != nil {
		return Internal("could not read the traffic history", err)
	}
	writeData(w, http.StatusOK, h)
	return nil
}

func (s *Server) notifySettings(w http.ResponseWriter, r *http.Request) error {
	if s.mon.Notify == nil {
		return errNoMonitoring
	}
	set, err := notify.Load(r.Context(), s.mon.Notify.Store)
	if err != nil {
		return Internal("could not read the notification settings", err)
	}
	writeData(w, http.StatusOK, set)
	return nil
}

func (s *Server) notifySetSettings(w http.ResponseWriter, r *http.Request) error {
	if s.mon.Notify == nil {
		return errNoMonitoring
	}
	var in notify.Settings
	if err := decode(r, &in); err != nil {
		return err
	}
	was, err := notify.Load(r.Context(), s.mon.Notify.Store)
	if err != nil {
		return Internal("could not read the notification settings", err)
	}
	set, err := notify.Save(r.Context(), s.mon.Notify.Store, in)
	var bad notify.InputError
	if errors.As(err, &bad) {
		return Errorf(http.StatusBadRequest, "%s", bad.Error())
	}
	if err != nil {
		return Internal("could not save the notification settings", err)
	}
	var ch changes
	if was.URL != set.URL {
		if a, b := webhookWords(was.URL), webhookWords(set.URL); a != b {
			ch.add("webhook", a, b)
		} else {
			ch.note("webhook URL changed (same host: " + b + ")")
		}
	}
	ch.add("preset", was.Preset, set.Preset)
	ch.add("offline after", strconv.Itoa(was.OfflineMinutes)+" min", strconv.Itoa(set.OfflineMinutes)+" min")
	if len(ch) > 0 {
		s.record(r, KindNotifyChanged, ch.String())
	}
	writeData(w, http.StatusOK, set)
	return nil
}

// notifyTest sends one test notification to the saved webhook now. The
// outcome is in the answer and in the activity feed.
func (s *Server) notifyTest(w http.ResponseWriter, r *http.Request) error {
	if s.mon.Notify == nil {
		return errNoMonitoring
	}
	set, err := notify.Load(r.Context(), s.mon.Notify.Store)
	if err != nil {
		return Internal("could not read the notification settings", err)
	}
	if set.URL == "" {
		return Errorf(http.StatusBadRequest, "no webhook URL is set")
	}
	if err := s.mon.Notify.Test(r.Context(), set); err != nil {
		writeData(w, http.StatusOK, map[string]any{"delivered": false, "message": "test notification failed: " + err.Error()})
		return nil
	}
	writeData(w, http.StatusOK, map[string]any{"delivered": true, "message": "test notification delivered"})
	return nil
}
