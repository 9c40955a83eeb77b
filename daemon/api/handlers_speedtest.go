package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/tunnelsvc/tunnelsvc/daemon/speedtest"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// speedTestBody is POST /api/machines/{id}/speedtest's body, optional.
type speedTestBody struct {
	// Seconds bounds each direction (1 to 10; 0 or absent: 10).
	Seconds int `json:"seconds"`
}

// startSpeedTest: POST /api/machines/{id}/speedtest. It answers 202 with
// the test running; GET .../speedtests follows it. A machine whose tunnel
// client is not connected is refused at once (409); one whose agent does
// not answer gets the agent routes' 502.
func (s *Server) startSpeedTest(w http.ResponseWriter, r *http.Request) error {
	if s.speedtests == nil || s.machines == nil {
		return Errorf(http.StatusServiceUnavailable, "this daemon does not run speed tests")
	}
	id, err := pathID(r, "machine_id")
	if err != nil {
		return err
	}
	var body speedTestBody
	if err := decodeOptional(r, &body); err != nil {
		return err
	}
	m, err := s.machines.Machine(r.Context(), id, "")
	if err != nil {
		return domainError(err, "machine")
	}
	if m.Status != "online" {
		why := m.StatusReason
		if why == "" {
			why = m.Status
		}
		return Errorf(http.StatusConflict, "machine %q is not connected (%s): a speed test runs through its tunnel", m.Name, why)
	}
	t, err := s.speedtests.Start(r.Context(), id, body.Seconds)
	var in speedtest.InputError
	var failed speedtest.StoreError
	switch {
	case errors.As(err, &failed):
		return Internal("could not start the speed test", err)
	case errors.As(err, &in):
		return Errorf(http.StatusBadRequest, "%s", in.Error())
	case errors.Is(err, store.ErrSpeedTestRunning):
		return Errorf(http.StatusConflict, "a speed test of machine %q is running; wait for it to end (GET /api/machines/%d/speedtests follows it)", m.Name, id)
	case errors.Is(err, speedtest.ErrAgentTooOld):
		return Errorf(http.StatusConflict, "the agent of machine %q predates speed tests: update the machine (Update on its page, or POST /api/machines/%d/update), then test again",
			m.Name, id)
	case err != nil:
		return agentError(err)
	}
	s.record(r, auditSpeedTest, fmt.Sprintf("speed test of machine %q started (at most %d s each way)", m.Name, t.Seconds))
	writeData(w, http.StatusAccepted, t)
	return nil
}

// speedTests: GET /api/machines/{id}/speedtests, the running test first,
// then the newest first (kept 90 days).
func (s *Server) speedTests(w http.ResponseWriter, r *http.Request) error {
	if s.speedtests == nil {
		return Errorf(http.StatusServiceUnavailable, "this daemon does not run speed tests")
	}
	id, err := pathID(r, "machine_id")
	if err != nil {
		return err
	}
	if s.machines != nil {
		if _, err := s.machines.Machine(r.Context(), id, ""); err != nil {
			return domainError(err, "machine")
		}
	}
	ts, err := s.speedtests.History(r.Context(), id)
	if err != nil {
		return Internal("could not read the speed tests", err)
	}
	writeData(w, http.StatusOK, ts)
	return nil
}
