package localsetup

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"
)

// Outcome is the stored result of the last install, ban-tool setup or
// firewall change, so the dashboard shows it after a reload or a restart.
type Outcome struct {
	OK      bool      `json:"ok"`
	Message string    `json:"message"`
	At      time.Time `json:"at"`
}

// Outcome names, and the background operations they come from.
const (
	OutcomeInstall  = "install"
	OutcomeBanner   = "banner"
	OutcomeFirewall = "firewall"
)

// outcomeOf maps a log-stream operation name to its outcome name.
var outcomeOf = map[string]string{"install": OutcomeInstall, "setup-banner": OutcomeBanner, "firewall": OutcomeFirewall}

// Outcomes returns the stored outcomes by name; names never run are absent.
func (s Settings) Outcomes(ctx context.Context) (map[string]Outcome, error) {
	out := map[string]Outcome{}
	for _, name := range []string{OutcomeInstall, OutcomeBanner, OutcomeFirewall} {
		raw, err := s.outcome(ctx, name)
		if err != nil {
			return nil, err
		}
		if raw == "" {
			continue
		}
		var o Outcome
		if err := json.Unmarshal([]byte(raw), &o); err != nil {
			return nil, err
		}
		out[name] = o
	}
	return out, nil
}

// SaveOutcome stores the outcome called name.
func (s Settings) SaveOutcome(ctx context.Context, name string, o Outcome) error {
	b, _ := json.Marshal(o)
	return s.setOutcome(ctx, name, string(b))
}

// RecordOperation stores how a background operation (by its log-stream
// name) ended; operations without an outcome name are ignored. It is the
// log hub's OnDone.
func (s *Service) RecordOperation(op string, ok bool, message string) {
	name, known := outcomeOf[op]
	if !known {
		return
	}
	s.RecordOutcome(context.Background(), name, ok, message)
}

// RecordOutcome stores an outcome now; a store failure is logged.
func (s *Service) RecordOutcome(ctx context.Context, name string, ok bool, message string) {
	now, log := s.Now, s.Log
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	o := Outcome{OK: ok, Message: message, At: now().UTC()}
	if err := s.Settings.SaveOutcome(context.WithoutCancel(ctx), name, o); err != nil {
		log.Error("storing an operation's outcome failed", "outcome", name, "err", err)
	}
}
