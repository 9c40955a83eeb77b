package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// unitError maps the unit layer's errors to what the operator sees: the
// allow-list refusal and a failed job keep their own text; no systemd is 503.
func unitError(err error) error {
	var notAllowed *units.NotAllowedError
	var job *units.JobError
	switch {
	case errors.As(err, &notAllowed):
		return Errorf(http.StatusBadRequest, "%s", notAllowed.Error())
	case errors.Is(err, units.ErrUnavailable):
		return &Error{Status: http.StatusServiceUnavailable, Msg: units.Explain(units.ErrUnavailable), Err: err}
	case errors.As(err, &job):
		return &Error{Status: http.StatusInternalServerError, Msg: job.Error(), Err: err}
	default:
		return Internal("unit operation failed", err)
	}
}

// unitsList answers the state of every managed unit.
func (s *Server) unitsList(w http.ResponseWriter, r *http.Request) error {
	list := make([]units.State, 0, len(units.Managed))
	for _, name := range units.Managed {
		st, err := s.units.State(r.Context(), name)
		if err != nil {
			return unitError(err)
		}
		list = append(list, st)
	}
	writeData(w, http.StatusOK, list)
	return nil
}

func (s *Server) unitGet(w http.ResponseWriter, r *http.Request) error {
	st, err := s.units.State(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		return unitError(err)
	}
	writeData(w, http.StatusOK, st)
	return nil
}

// unitJob runs start, stop, restart or reload and answers the unit's state
// once systemd's job is done.
func (s *Server) unitJob(op string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		name := mux.Vars(r)["name"]
		run := map[string]func(context.Context, string) error{
			"start": s.units.Start, "stop": s.units.Stop,
			"restart": s.units.Restart, "reload": s.units.Reload,
		}[op]
		if err := run(r.Context(), name); err != nil {
			return unitError(err)
		}
		st, err := s.units.State(r.Context(), name)
		if err != nil {
			return unitError(err)
		}
		s.log.Info("unit operation", "op", op, "unit", st.Name, "client", client(r).Addr.String())
		s.record(r, "UNIT_"+strings.ToUpper(op), op+" "+st.Name+": done")
		writeData(w, http.StatusOK, map[string]any{"message": op + " " + st.Name + ": done", "unit": st})
		return nil
	}
}
