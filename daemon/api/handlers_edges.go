package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/edges"
	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Audit kinds of the cluster's edges (category settings).
const (
	auditEdgeTokenCreated = "EDGE_TOKEN_CREATED"
	auditEdgeJoined       = "EDGE_JOINED"
	auditEdgeJoinRefused  = "EDGE_JOIN_REFUSED"
	auditEdgeRetired      = "EDGE_RETIRING"
)

func edgesError(err error) error {
	var in edges.InputError
	switch {
	case errors.As(err, &in):
		return Errorf(http.StatusBadRequest, "%s", in.Msg)
	case errors.Is(err, edges.ErrNotShared), errors.Is(err, edges.ErrSelf), errors.Is(err, edges.ErrLast):
		return Errorf(http.StatusConflict, "%s", err.Error())
	case errors.Is(err, store.ErrNotFound):
		return Errorf(http.StatusNotFound, "edge not found")
	case errors.Is(err, store.ErrTokenInvalid):
		return Errorf(http.StatusUnauthorized, "invalid or expired token")
	}
	return Internal("could not handle the edges", err)
}

// listEdges: GET /api/edges.
func (s *Server) listEdges(w http.ResponseWriter, r *http.Request) error {
	list, err := s.edges.List(r.Context())
	if err != nil {
		return edgesError(err)
	}
	writeData(w, http.StatusOK, list)
	return nil
}

// createEdgeToken: POST /api/edges/tokens (sudo mode: the token opens the
// database URL and the sealing key to whoever runs the command).
func (s *Server) createEdgeToken(w http.ResponseWriter, r *http.Request) error {
	a, err := s.reach.Resolve(r.Context(), s.reachRequest(r))
	if err != nil {
		return Internal("could not read the settings", err)
	}
	base, warning := a.EdgeJoinBase, ""
	if base == "" {
		at := a.JoinBase
		if at == "" {
			at = s.requestBaseURL(r)
		}
		return Errorf(http.StatusConflict, "a new edge fetches the database's address and the sealing key from this edge, only over HTTPS, and this edge is reached at %s: install the web proxy with a domain first (its dashboard is then at https://router.<domain>), or set --base-url to an https:// address", at)
	}
	if a.JoinBaseFrom == reach.FromRequest && base == a.JoinBase {
		warning = "No address other edges can reach is set, so this command uses " + base +
			", the address this page was opened at. Set --base-url (TUNNELSVC_BASE_URL), or install the web proxy with a domain (router.<domain>)."
	}
	tok, err := s.edges.CreateToken(r.Context())
	if err != nil {
		return edgesError(err)
	}
	s.record(r, auditEdgeTokenCreated, fmt.Sprintf("edge join token #%d created, valid until %s", tok.ID, tok.ExpiresAt.Format("2006-01-02 15:04 MST")))
	out := map[string]any{
		"token":      tok.Token,
		"expires_at": tok.ExpiresAt,
		"command":    "tunnelsvc edge join " + base + " " + tok.Token,
	}
	if warning != "" {
		out["warning"] = warning
	}
	writeData(w, http.StatusOK, out)
	return nil
}

type edgeJoinBody struct {
	Token string `json:"token"`
	Name  string `json:"name"`
}

// joinEdge: POST /api/edges/join, the door `tunnelsvc edge join` knocks
// at (a one-time token, rate-limited per address like every login).
func (s *Server) joinEdge(w http.ResponseWriter, r *http.Request) error {
	var body edgeJoinBody
	if err := decode(r, &body); err != nil {
		return err
	}
	c := client(r)
	if ok, retry := s.auth.Limiter.Check(c.Addr); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(retry))
		return Errorf(http.StatusTooManyRequests, "%s", (&auth.RateLimitedError{RetryAfter: retry}).Error())
	}
	g, err := s.edges.Join(r.Context(), strings.TrimSpace(body.Token), strings.TrimSpace(body.Name))
	if errors.Is(err, store.ErrTokenInvalid) {
		s.auth.Limiter.Fail(c.Addr)
		s.record(r, auditEdgeJoinRefused, fmt.Sprintf("edge %q tried to join with an invalid or expired token", strings.TrimSpace(body.Name)))
	}
	if err != nil {
		return edgesError(err)
	}
	s.record(r, auditEdgeJoined, fmt.Sprintf("edge %q joined the cluster", g.Name))
	writeData(w, http.StatusOK, g)
	return nil
}

// retireEdge: DELETE /api/edges/{edge_id}.
func (s *Server) retireEdge(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "edge_id")
	if err != nil {
		return err
	}
	e, err := s.edges.Retire(r.Context(), id)
	if err != nil {
		return edgesError(err)
	}
	s.record(r, auditEdgeRetired, fmt.Sprintf("edge %q (%s) is being retired: machines drop it, then it is forgotten", e.Name, e.Address))
	writeData(w, http.StatusAccepted, message(fmt.Sprintf("edge %q is being retired: machines drop it from their set, then it is forgotten", e.Name)))
	return nil
}
