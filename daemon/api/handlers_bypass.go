package api

import (
	"fmt"
	"net/http"

	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
)

// Audit kinds of an http tunnel's bypass tokens and visitor sessions.
const (
	auditBypassTokenCreated = "BYPASS_TOKEN_CREATED"
	auditBypassTokenRevoked = "BYPASS_TOKEN_REVOKED"
	auditVisitorsSignedOut  = "TUNNEL_VISITORS_SIGNED_OUT"
)

// createBypassToken: POST /api/tunnels/{tunnel_id}/bypass-tokens. The
// secret is in this answer only.
func (s *Server) createBypassToken(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "tunnel_id")
	if err != nil {
		return err
	}
	var in machines.BypassTokenInput
	if err := decode(r, &in); err != nil {
		return err
	}
	b, err := s.machines.CreateBypassToken(r.Context(), id, in)
	if err != nil {
		return domainError(err, "tunnel")
	}
	t, _ := s.machines.Tunnel(r.Context(), id)
	s.record(r, auditBypassTokenCreated, fmt.Sprintf("bypass token %q for tunnel %q, expires %s", b.Name, t.Name, b.ExpiresAt.Format("2006-01-02")))
	writeData(w, http.StatusCreated, b)
	return nil
}

// listBypassTokens: GET /api/tunnels/{tunnel_id}/bypass-tokens.
func (s *Server) listBypassTokens(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "tunnel_id")
	if err != nil {
		return err
	}
	list, err := s.machines.BypassTokens(r.Context(), id)
	if err != nil {
		return domainError(err, "tunnel")
	}
	writeData(w, http.StatusOK, list)
	return nil
}

// revokeBypassToken: DELETE /api/tunnels/{tunnel_id}/bypass-tokens/{token_id}.
func (s *Server) revokeBypassToken(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "tunnel_id")
	if err != nil {
		return err
	}
	tokenID, err := pathID(r, "token_id")
	if err != nil {
		return err
	}
	b, err := s.machines.RevokeBypassToken(r.Context(), id, tokenID)
	if err != nil {
		return domainError(err, "bypass token")
	}
	t, _ := s.machines.Tunnel(r.Context(), id)
	s.record(r, auditBypassTokenRevoked, fmt.Sprintf("bypass token %q of tunnel %q revoked", b.Name, t.Name))
	writeData(w, http.StatusOK, message(fmt.Sprintf("bypass token %s revoked", b.Name)))
	return nil
}

// endVisitorSessions: DELETE /api/tunnels/{tunnel_id}/sessions signs every
// visitor of the tunnel's gate out, remembered devices included.
func (s *Server) endVisitorSessions(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "tunnel_id")
	if err != nil {
		return err
	}
	t, err := s.machines.EndVisitorSessions(r.Context(), id)
	if err != nil {
		return domainError(err, "tunnel")
	}
	s.record(r, auditVisitorsSignedOut, fmt.Sprintf("every visitor of tunnel %q signed out", t.Name))
	writeData(w, http.StatusOK, message("every visitor of "+t.Name+" is signed out"))
	return nil
}
