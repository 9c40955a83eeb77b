package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Agents reaches a machine's tunnel-agent (package agentclient implements it).
type Agents interface {
	Status(ctx context.Context, machineID int64) (any, error)
	RestartTunnel(ctx context.Context, machineID int64) (string, error)
}

// agentError maps what reaching an agent can fail with.
func agentError(err error) error {
	var ae *agentclient.AgentError
	var ue *agentclient.UnreachableError
	var ne *agentclient.NotAgentError
	var le *agentclient.UnprovenListenerError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Errorf(http.StatusNotFound, "machine not found")
	case errors.As(err, &ue):
		return &Error{Status: http.StatusBadGateway, Msg: ue.Error(), Err: err}
	case errors.As(err, &ne):
		return &Error{Status: http.StatusBadGateway, Msg: ne.Error(), Err: err}
	case errors.As(err, &le):
		return &Error{Status: http.StatusBadGateway, Msg: le.Error(), Err: err}
	case errors.As(err, &ae):
		return &Error{Status: http.StatusBadGateway, Msg: ae.Error(), Err: err}
	}
	return Internal("could not reach the machine's agent", err)
}

// agentStatus: GET /api/machines/{id}/agent/status.
func (s *Server) agentStatus(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "machine_id")
	if err != nil {
		return err
	}
	st, err := s.agents.Status(r.Context(), id)
	if err != nil {
		return agentError(err)
	}
	writeData(w, http.StatusOK, st)
	return nil
}

// agentRestartTunnel: POST /api/machines/{id}/agent/restart-tunnel.
func (s *Server) agentRestartTunnel(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "machine_id")
	if err != nil {
		return err
	}
	msg, err := s.agents.RestartTunnel(r.Context(), id)
	if err != nil {
		return agentError(err)
	}
	name := fmt.Sprintf("#%d", id)
	if s.machines != nil {
		if m, err := s.machines.Machine(r.Context(), id, ""); err == nil {
			name = fmt.Sprintf("%q", m.Name)
		}
	}
	s.record(r, auditAgentRestart, "tunnel client of machine "+name+" restarted")
	writeData(w, http.StatusOK, message(msg))
	return nil
}
