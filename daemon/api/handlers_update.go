package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/bundle"
	"github.com/tunnelsvc/tunnelsvc/daemon/fleet"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/version"
)

type updateBody struct {
	Version    string  `json:"version"`
	MachineIDs []int64 `json:"machine_ids"`
	All        bool    `json:"all"`
	Batch      *int    `json:"batch"`
}

// serverBundle is the server's bundle version, or why there is none.
func (s *Server) serverBundle() (string, error) {
	v, err := s.fleet.ServerVersion()
	var missing *bundle.MissingError
	if errors.As(err, &missing) {
		return "", &Error{Status: http.StatusServiceUnavailable, Msg: "this server has no machine bundle to update to: " + missing.Error(), Err: err}
	}
	if err != nil {
		return "", Internal("could not read the server's bundle version", err)
	}
	return v, nil
}

// updatable refuses what must not be updated to server: an unsupported
// machine and, unless asked names server, a downgrade.
func updatable(m machines.Machine, server, asked string) error {
	if m.Update.Blocked != "" {
		return Errorf(http.StatusConflict, "machine %q cannot be updated now: %s", m.Name, m.Update.Blocked)
	}
	if m.Update.State == fleet.StateUnsupported {
		how := m.Update.RejoinCommand
		if how == "" {
			how = "run the join again on it (bootstrap.sh with a new token from Machines > Add machine)"
		} else {
			how = "run this on it: " + how
		}
		return Errorf(http.StatusConflict, "machine %q cannot take an update (its agent predates fleet updates); %s", m.Name, how)
	}
	if asked == "" && version.Newer(m.BundleVersion, server) {
		return Errorf(http.StatusConflict, "machine %q runs bundle %s, newer than this server's %s; to go back to %s, send {\"version\": %q}",
			m.Name, m.BundleVersion, server, server, server)
	}
	return nil
}

func versionWords(v string) string {
	if v == "" {
		return "(unknown)"
	}
	return v
}

// machineUpdate: POST /api/machines/{id}/update.
func (s *Server) machineUpdate(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "machine_id")
	if err != nil {
		return err
	}
	var body updateBody
	if err := decodeOptional(r, &body); err != nil {
		return err
	}
	m, err := s.machines.Machine(r.Context(), id, s.fallbackHost(r))
	if err != nil {
		return domainError(err, "machine")
	}
	s.withRejoin(r, &m)
	server, err := s.serverBundle()
	if err != nil {
		return err
	}
	if body.Version != "" && body.Version != server {
		return Errorf(http.StatusConflict, "this server's bundle is %s, not %s: machines can only be updated to it", server, body.Version)
	}
	if err := updatable(m, server, body.Version); err != nil {
		return err
	}
	base, _, err := s.joinBase(r)
	if err != nil {
		return err
	}
	if err := s.startRollout(r, fleet.Plan{IDs: []int64{id}, Batch: 1, Target: server, Base: base}); err != nil {
		return err
	}
	s.record(r, fleet.AuditStarted, fmt.Sprintf("machine %q: bundle %s → %s", m.Name, versionWords(m.BundleVersion), server))
	writeData(w, http.StatusAccepted, message(fmt.Sprintf("updating machine %q to bundle %s: its state shows how it goes", m.Name, server)))
	return nil
}

// startRollout stores p as the running fleet update, which the edge that
// holds the lease runs (this one, or another).
func (s *Server) startRollout(r *http.Request, p fleet.Plan) error {
	err := s.rollouts.Start(r.Context(), p)
	if errors.Is(err, store.ErrRolloutRunning) {
		return Errorf(http.StatusConflict, "a fleet update is running; wait for it to end (GET /api/machines/update shows it)")
	}
	if err != nil {
		return Internal("could not start the update", err)
	}
	return nil
}

// fleetUpdate: POST /api/machines/update.
func (s *Server) fleetUpdate(w http.ResponseWriter, r *http.Request) error {
	var body updateBody
	if err := decodeOptional(r, &body); err != nil {
		return err
	}
	switch {
	case body.All && len(body.MachineIDs) > 0:
		return Errorf(http.StatusBadRequest, "give machine_ids or all, not both")
	case !body.All && len(body.MachineIDs) == 0:
		return Errorf(http.StatusBadRequest, "give machine_ids (a list of machine ids) or all: true")
	}
	batch := fleet.DefaultBatch
	if body.Batch != nil {
		if *body.Batch < 1 || *body.Batch > 50 {
			return Errorf(http.StatusBadRequest, "batch must be between 1 and 50")
		}
		batch = *body.Batch
	}
	server, err := s.serverBundle()
	if err != nil {
		return err
	}
	if body.Version != "" && body.Version != server {
		return Errorf(http.StatusConflict, "this server's bundle is %s, not %s: machines can only be updated to it", server, body.Version)
	}
	all, err := s.machines.Machines(r.Context(), s.fallbackHost(r))
	if err != nil {
		return Internal("could not list the machines", err)
	}
	for i := range all {
		s.withRejoin(r, &all[i])
	}
	byID := map[int64]machines.Machine{}
	for _, m := range all {
		byID[m.ID] = m
	}
	var chosen []machines.Machine
	if body.All {
		// Every machine that can take the server's bundle and lacks it;
		// machines that run a newer one are left alone (no downgrade by
		// "all").
		for _, m := range all {
			if !machines.ForUpdateAll(m, server) {
				continue
			}
			chosen = append(chosen, m)
		}
		if len(chosen) == 0 {
			return Errorf(http.StatusConflict, "no machine needs an update: every machine runs bundle %s, runs a newer one, or cannot take an update", server)
		}
	} else {
		seen := map[int64]bool{}
		for _, id := range body.MachineIDs {
			m, ok := byID[id]
			if !ok {
				return Errorf(http.StatusNotFound, "machine %d not found", id)
			}
			if seen[id] {
				continue
			}
			seen[id] = true
			if err := updatable(m, server, body.Version); err != nil {
				return err
			}
			chosen = append(chosen, m)
		}
	}
	ids := make([]int64, 0, len(chosen))
	var what []string
	for _, m := range chosen {
		ids = append(ids, m.ID)
		what = append(what, fmt.Sprintf("%q %s → %s", m.Name, versionWords(m.BundleVersion), server))
	}
	base, _, err := s.joinBase(r)
	if err != nil {
		return err
	}
	if err := s.startRollout(r, fleet.Plan{IDs: ids, Batch: batch, Target: server, Base: base}); err != nil {
		return err
	}
	s.record(r, fleet.AuditStarted, fmt.Sprintf("fleet update of %d machine(s), batches of %d: %s", len(ids), batch, firstOf(what, auditNames)))
	writeData(w, http.StatusAccepted, map[string]any{
		"message":     fmt.Sprintf("updating %d machine(s) to bundle %s: one first, then %d at a time", len(ids), server, batch),
		"machine_ids": ids,
	})
	return nil
}

// fleetUpdateStatus: GET /api/machines/update, the same on every edge.
func (s *Server) fleetUpdateStatus(w http.ResponseWriter, r *http.Request) error {
	sum, err := s.rollouts.Last(r.Context())
	if err != nil {
		return Internal("could not read the last fleet update", err)
	}
	writeData(w, http.StatusOK, sum)
	return nil
}

// auditNames is how many machines an audit line names; a fleet update of
// thousands names these and counts the rest.
const auditNames = 20

// firstOf joins the first n of what, and says how many more there are.
func firstOf(what []string, n int) string {
	if len(what) <= n {
		return strings.Join(what, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(what[:n], ", "), len(what)-n)
}
