package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/apitokens"
	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Audit kinds of API tokens. A refused token is an authentication failure
// (the ban tool counts it, as a wrong password).
const (
	auditAPITokenCreated = "API_TOKEN_CREATED"
	auditAPITokenRevoked = "API_TOKEN_REVOKED"
	auditAPITokenFailed  = "API_TOKEN_FAILED"
)

func init() { audit.RegisterFailureKind(auditAPITokenFailed) }

// bearer is r's Authorization: Bearer credential ("" when none).
func bearer(r *http.Request) string { return auth.Bearer(r.Header) }

// Refusals of API tokens.
var (
	errTokenInvalid   = Errorf(http.StatusUnauthorized, "invalid or expired API token")
	errTokenReadOnly  = Errorf(http.StatusForbidden, "this API token is read-only (scope read): it may only send GET requests")
	errTokenForbidden = Errorf(http.StatusForbidden, "API tokens cannot be used here: API tokens, two-factor, passkeys, single sign-on, "+
		"the password and what needs a recent sign-in are for the operator signed in to the dashboard")
)

// withAPIToken authenticates a request that carries no session by its
// bearer API token, on a route of access a: read takes a token of either
// scope, write one of scope write, and no other route takes tokens. A
// refused token counts against the address in the login rate limit and
// is audited. It returns the request to serve, or the error.
func (s *Server) withAPIToken(r *http.Request, a access) (*http.Request, error) {
	secret := bearer(r)
	if a != read && a != write {
		return nil, errTokenForbidden
	}
	c := client(r)
	res, err := s.auth.Reserve(r.Context(), c)
	if err != nil {
		return nil, err
	}
	t, err := s.tokens.Check(r.Context(), secret, c.Addr.String())
	if errors.Is(err, apitokens.ErrInvalid) {
		s.audit.Record(r.Context(), audit.Event{Kind: auditAPITokenFailed, Client: c.Addr, UserAgent: c.UserAgent, Detail: "invalid or expired API token"})
		return nil, errTokenInvalid
	}
	res.Release()
	if err != nil {
		return nil, Internal("could not check the API token", err)
	}
	if t.Scope == apitokens.ScopeRead && a != read {
		return nil, errTokenReadOnly
	}
	// Whatever records an event for this request names the token.
	return r.WithContext(audit.WithActor(r.Context(), fmt.Sprintf("API token %q", t.Name))), nil
}

// listAPITokens: GET /api/tokens.
func (s *Server) listAPITokens(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.tokens.List(r.Context())
	if err != nil {
		return Internal("could not list the API tokens", err)
	}
	writeData(w, http.StatusOK, ts)
	return nil
}

// createAPIToken: POST /api/tokens {name, scope, expires_in_days}: the
// token is in the answer, once.
func (s *Server) createAPIToken(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Name          string `json:"name"`
		Scope         string `json:"scope"`
		ExpiresInDays *int   `json:"expires_in_days"`
	}
	if err := decode(r, &in); err != nil {
		return err
	}
	days := 0
	if in.ExpiresInDays != nil {
		if days = *in.ExpiresInDays; days < 1 {
			return Errorf(http.StatusBadRequest, "expires_in_days must be between 1 and %d", apitokens.MaxDays)
		}
	}
	t, err := s.tokens.Create(r.Context(), in.Name, in.Scope, days)
	var bad apitokens.InputError
	if errors.As(err, &bad) {
		status := http.StatusBadRequest
		if strings.HasPrefix(string(bad), "an API token named") {
			status = http.StatusConflict
		}
		return Errorf(status, "%s", string(bad))
	}
	if err != nil {
		return Internal("could not create the API token", err)
	}
	s.record(r, auditAPITokenCreated, fmt.Sprintf("API token %q (%s) created, expires %s", t.Name, t.Scope, t.ExpiresAt.Format("2006-01-02")))
	writeData(w, http.StatusCreated, t)
	return nil
}

// revokeAPIToken: DELETE /api/tokens/{id}: refused from the next request.
func (s *Server) revokeAPIToken(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "token_id")
	if err != nil {
		return err
	}
	t, err := s.tokens.Revoke(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return Errorf(http.StatusNotFound, "API token not found")
	}
	if err != nil {
		return Internal("could not revoke the API token", err)
	}
	s.record(r, auditAPITokenRevoked, fmt.Sprintf("API token %q (%s) revoked", t.Name, t.Scope))
	writeData(w, http.StatusOK, t)
	return nil
}
