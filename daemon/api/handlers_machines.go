package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alessio/shellescape"
	"github.com/gorilla/mux"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/fleet"
	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
)

// RevtunnelServer renders and deploys the tunnel server's config. The
// revtunnel package implements it; api only sees this interface, so it never
// runs frps itself.
type RevtunnelServer interface {
	// Render returns the config as it would be deployed, custom block empty.
	Render(ctx context.Context) (string, error)
	// Reconcile deploys it when it changed and says what it did.
	Reconcile(ctx context.Context) (message string, err error)
}

// requestBaseURL is the scheme and host this request came by.
func (s *Server) requestBaseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || (r.Header.Get("X-Forwarded-Proto") == "https" && s.peerIsLocal(r)) {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// safeBaseURL says which base URLs may go into shell text: those
// validate.BaseURL, the one base-URL validator, accepts.
var safeBaseURL baseURLRule

type baseURLRule struct{}

// MatchString reports whether s may go into shell text.
func (baseURLRule) MatchString(s string) bool { return validate.BaseURL(s) == nil }

// joinCommand is the one line an operator runs on a machine. Each value is
// shell-quoted (a plain URL and token come out unchanged).
func quotedJoinCommand(base, token string) string {
	return "curl -fsSL " + shellescape.Quote(base+"/static/bootstrap.sh") + " -o bootstrap.sh && bash bootstrap.sh " + shellescape.Quote(token)
}

// fallbackHost is the host r reached the dashboard by, which the
// machines service passes to the resolver as its last resort.
func (s *Server) fallbackHost(r *http.Request) string { return requestHost(r) }

func pathID(r *http.Request, name string) (int64, error) {
	id, err := strconv.ParseInt(mux.Vars(r)[name], 10, 64)
	if err != nil || id <= 0 {
		return 0, Errorf(http.StatusNotFound, "%s not found", strings.TrimSuffix(name, "_id"))
	}
	return id, nil
}

// domainError maps the machines domain's errors to what the client sees.
func domainError(err error, what string) error {
	var in machines.InputError
	var taken machines.ConflictError
	var limited *auth.RateLimitedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &in):
		return Errorf(http.StatusBadRequest, "%s", in.Error())
	case errors.As(err, &taken):
		return Errorf(http.StatusConflict, "%s", taken.Error())
	case errors.Is(err, store.ErrNotFound):
		return Errorf(http.StatusNotFound, "%s not found", what)
	case errors.Is(err, store.ErrNameTaken):
		return Errorf(http.StatusConflict, "%s", store.ErrNameTaken.Error())
	case errors.As(err, &limited):
		return limited
	case errors.Is(err, store.ErrNoFreePort):
		return &Error{Status: http.StatusServiceUnavailable, Msg: store.ErrNoFreePort.Error(), Err: err}
	}
	return Internal("could not "+strings.TrimSpace("handle the "+what), err)
}

type tokenBody struct {
	ExpiresInMinutes *int   `json:"expires_in_minutes"`
	Label            string `json:"label"`
}

// createBootstrapToken: POST /api/bootstrap/tokens.
func (s *Server) createBootstrapToken(w http.ResponseWriter, r *http.Request) error {
	var body tokenBody
	if err := decode(r, &body); err != nil {
		return err
	}
	ttl := time.Duration(0)
	if body.ExpiresInMinutes != nil {
		if *body.ExpiresInMinutes <= 0 {
			return Errorf(http.StatusBadRequest, "expires_in_minutes must be between 1 and %d", int(machines.MaxTokenTTL.Minutes()))
		}
		ttl = time.Duration(*body.ExpiresInMinutes) * time.Minute
	}
	base, warning, err := s.joinBase(r)
	if err != nil {
		return err
	}
	// Checked before the token exists, so a refusal changes nothing.
	if _, err := s.joinCommand(base, "probe"); err != nil {
		return err
	}
	tok, err := s.machines.CreateLabeledToken(r.Context(), ttl, body.Label)
	if err != nil {
		return domainError(err, "token")
	}
	s.record(r, auditTokenCreated, tokenDetail("created", tok.ID, tok.Label))
	command, err := s.joinCommand(base, tok.Token)
	if err != nil {
		return err
	}
	out := map[string]any{
		"id":         tok.ID,
		"label":      tok.Label,
		"token":      tok.Token,
		"created_at": tok.CreatedAt,
		"expires_at": tok.ExpiresAt,
		"command":    command,
	}
	if warning != "" {
		out["warning"] = warning
	}
	writeData(w, http.StatusOK, out)
	return nil
}

func (s *Server) listBootstrapTokens(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.machines.PendingTokens(r.Context())
	if err != nil {
		return Internal("could not list the tokens", err)
	}
	writeData(w, http.StatusOK, ts)
	return nil
}

// getBootstrapToken: one token, so the dashboard can follow a join.
func (s *Server) getBootstrapToken(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "token_id")
	if err != nil {
		return err
	}
	t, err := s.machines.Token(r.Context(), id)
	if err != nil {
		return domainError(err, "token")
	}
	writeData(w, http.StatusOK, t)
	return nil
}

func (s *Server) revokeBootstrapToken(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "token_id")
	if err != nil {
		return err
	}
	t, err := s.machines.Token(r.Context(), id)
	if err != nil {
		return domainError(err, "token")
	}
	if err := s.machines.RevokeToken(r.Context(), id); err != nil {
		return domainError(err, "token")
	}
	s.record(r, auditTokenRevoked, tokenDetail("revoked", t.ID, t.Label))
	writeData(w, http.StatusOK, message("token revoked"))
	return nil
}

type bootstrapBody struct {
	Token    string `json:"token"`
	Name     string `json:"name"`
	Username string `json:"username"`
}

// bootstrap: spec §4.5 POST /api/bootstrap (public, rate-limited).
func (s *Server) bootstrap(w http.ResponseWriter, r *http.Request) error {
	var body bootstrapBody
	if err := decode(r, &body); err != nil {
		return err
	}
	reg, err := s.machines.Bootstrap(r.Context(), machines.BootstrapRequest{
		Token: body.Token, Name: body.Name, Username: body.Username,
		Client: client(r).Addr, FallbackHost: s.fallbackHost(r),
	})
	var limited *auth.RateLimitedError
	switch {
	case errors.Is(err, machines.ErrInvalidToken):
		return Errorf(http.StatusUnauthorized, "invalid or expired token")
	case errors.Is(err, machines.ErrNameTaken):
		return Errorf(http.StatusConflict, "%s", machines.ErrNameTaken.Error())
	case errors.As(err, &limited):
		w.Header().Set("Retry-After", strconv.Itoa(limited.RetryAfter))
		return Errorf(http.StatusTooManyRequests, "%s", limited.Error())
	case err != nil:
		return domainError(err, "registration")
	}
	s.record(r, auditMachineRegistered, fmt.Sprintf("machine %q (user %s) registered with tunnel port %d", strings.TrimSpace(body.Name), strings.TrimSpace(body.Username), reg.TunnelPort))
	writeData(w, http.StatusOK, reg)
	return nil
}

func (s *Server) staleTokens(w http.ResponseWriter, r *http.Request) error {
	as, err := s.machines.StaleTokenAttempts(r.Context())
	if err != nil {
		return Internal("could not read the stale-token attempts", err)
	}
	writeData(w, http.StatusOK, as)
	return nil
}

func (s *Server) listMachines(w http.ResponseWriter, r *http.Request) error {
	q, paged, err := listQuery(r)
	if err != nil {
		return err
	}
	ms, gen, err := s.machines.List(r.Context(), s.fallbackHost(r))
	if err != nil {
		return Internal("could not list the machines", err)
	}
	if paged {
		return s.machinePage(w, r, ms, q)
	}
	// The rejoin line, which depends on how this request reached the
	// dashboard, only when a machine needs it.
	line := ""
	for i := range ms {
		if needsRejoin(&ms[i]) {
			line, _ = s.rejoinCommand(r)
			break
		}
	}
	body := s.machineList.body(gen, line, func() []byte {
		cp := make([]machines.Machine, len(ms)) // [] when there are none, never null
		copy(cp, ms)
		for i := range cp {
			if needsRejoin(&cp[i]) {
				cp[i].Update.RejoinCommand = line
			}
		}
		var b bytes.Buffer
		json.NewEncoder(&b).Encode(dataEnvelope{Data: cp})
		return b.Bytes()
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
	return nil
}

// listQuery reads GET /api/machines's query: limit, cursor, q and state.
// paged is false when none is given (every machine, as before paging).
// Anything else is refused in words.
func listQuery(r *http.Request) (q machines.ListQuery, paged bool, err error) {
	v := r.URL.Query()
	lp, paged, err := readListParams(v, "machine list", []listFilter{{"state", machines.ListStates}}, nil)
	if err != nil || !paged {
		return q, false, err
	}
	q.Limit, q.After, q.Search, q.State = lp.limit, lp.after, lp.search, v.Get("state")
	return q, true, nil
}

// inWords is "a, b and c".
func inWords(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// listParams are what every paged list takes: limit, cursor and q.
type listParams struct {
	limit  int
	after  int64
	search string
}

// listFilter is a filter a list takes: its query parameter and the values
// it may have.
type listFilter struct {
	name   string
	values []string
}

// readListParams reads limit, cursor and q from a list's query, which may
// also hold filters (the list's own, checked here and read by its caller)
// and plain parameters (which do not ask for a page). Any other name, or a
// filter's value it does not take, is refused in words that name the list
// or the values. paged is true when limit, cursor, q or a filter is given.
func readListParams(v url.Values, list string, filters []listFilter, plain []string) (p listParams, paged bool, err error) {
	known := []string{"limit", "cursor", "q"}
	for _, f := range filters {
		known = append(known, f.name)
	}
	for k := range v {
		switch {
		case slices.Contains(known, k):
			paged = true
		case slices.Contains(plain, k):
		default:
			return p, false, Errorf(http.StatusBadRequest, "unknown query parameter %q: the %s takes %s", k, list, inWords(append(known, plain...)))
		}
	}
	if !paged {
		return p, false, nil
	}
	p.limit = machines.DefaultPageSize
	if l := v.Get("limit"); v.Has("limit") {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > machines.MaxPageSize {
			return p, false, Errorf(http.StatusBadRequest, "limit must be a whole number from 1 to %d", machines.MaxPageSize)
		}
		p.limit = n
	}
	if c := v.Get("cursor"); c != "" {
		after, ok := machines.ParseCursor(c)
		if !ok {
			return p, false, Errorf(http.StatusBadRequest, "cursor %q is not one this list gave: start again without it", c)
		}
		p.after = after
	}
	p.search = strings.TrimSpace(v.Get("q"))
	if len(p.search) > 200 {
		return p, false, Errorf(http.StatusBadRequest, "q is longer than 200 characters")
	}
	for _, f := range filters {
		if x := v.Get(f.name); x != "" && !slices.Contains(f.values, x) {
			return p, false, Errorf(http.StatusBadRequest, "%s must be one of: %s", f.name, strings.Join(f.values, ", "))
		}
	}
	return p, true, nil
}

// pageInfo is a paged list's "page" beside "data": how many rows match
// the query on every page, the next page's cursor, and the list's counts
// (C: machines.Counts, machines.TunnelCounts).
type pageInfo[C any] struct {
	Matched int `json:"matched"`
	// NextCursor fetches the next page ("" on the last).
	NextCursor string `json:"next_cursor"`
	Counts     C      `json:"counts"`
}

// machinePage answers one page of ms, with the fleet's counts.
func (s *Server) machinePage(w http.ResponseWriter, r *http.Request, ms []machines.Machine, q machines.ListQuery) error {
	// No bundle to update to: no machine for Update all.
	server := ""
	if s.fleet != nil {
		server, _ = s.serverBundle()
	}
	p := machines.Select(ms, q, server)
	// Copies: the list is shared, and the rejoin line is this request's.
	items := slices.Clone(p.Items)
	for i := range items {
		s.withRejoin(r, &items[i])
	}
	writePage(w, items, pageInfo[machines.Counts]{Matched: p.Matched, NextCursor: p.Next, Counts: p.Counts})
	return nil
}

// encodedList is the last machine list answered, encoded: the dashboard
// polls the list, and between changes every poll gets the same bytes.
type encodedList struct {
	mu   sync.Mutex
	gen  uint64
	line string
	data []byte
}

// body returns the bytes for list generation gen with rejoin line line,
// encoding them once.
func (e *encodedList) body(gen uint64, line string, encode func() []byte) []byte {
	e.mu.Lock()
	if e.data != nil && e.gen == gen && e.line == line {
		b := e.data
		e.mu.Unlock()
		return b
	}
	e.mu.Unlock()
	b := encode()
	e.mu.Lock()
	e.gen, e.line, e.data = gen, line, b
	e.mu.Unlock()
	return b
}

func (s *Server) getMachine(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "machine_id")
	if err != nil {
		return err
	}
	m, err := s.machines.Machine(r.Context(), id, s.fallbackHost(r))
	if err != nil {
		return domainError(err, "machine")
	}
	s.withRejoin(r, &m)
	writeData(w, http.StatusOK, m)
	return nil
}

// withRejoin gives every unsupported machine among ms the one line that
// re-runs its join (rejoinCommand, as this request would be told it); the
// line is left empty when no address for machines is known.
func (s *Server) withRejoin(r *http.Request, ms ...*machines.Machine) {
	line, known := "", false
	for _, m := range ms {
		if !needsRejoin(m) {
			continue
		}
		if !known {
			line, _ = s.rejoinCommand(r)
			known = true
		}
		m.Update.RejoinCommand = line
	}
}

// needsRejoin: a machine whose agent cannot update itself is shown the
// line that re-runs its join.
func needsRejoin(m *machines.Machine) bool { return m.Update.State == fleet.StateUnsupported }

type renameBody struct {
	Name *string `json:"name"`
}

func (s *Server) renameMachine(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "machine_id")
	if err != nil {
		return err
	}
	var body renameBody
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Name == nil {
		return Errorf(http.StatusBadRequest, "name is required")
	}
	old, err := s.machines.Machine(r.Context(), id, s.fallbackHost(r))
	if err != nil {
		return domainError(err, "machine")
	}
	m, err := s.machines.Rename(r.Context(), id, *body.Name, s.fallbackHost(r))
	if err != nil {
		return domainError(err, "machine")
	}
	if old.Name != m.Name {
		s.record(r, auditMachineRenamed, fmt.Sprintf("machine renamed: %q → %q", old.Name, m.Name))
	}
	writeData(w, http.StatusOK, m)
	return nil
}

func (s *Server) deleteMachine(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "machine_id")
	if err != nil {
		return err
	}
	m, err := s.machines.Machine(r.Context(), id, s.fallbackHost(r))
	if err != nil {
		return domainError(err, "machine")
	}
	if err := s.machines.Delete(r.Context(), id); err != nil {
		return domainError(err, "machine")
	}
	s.record(r, auditMachineDeleted, fmt.Sprintf("machine %q deleted with its tunnels", m.Name))
	writeData(w, http.StatusOK, message("machine deleted"))
	return nil
}

// machineClientConfig: the machine's current frpc config, which the agent
// (or the operator) puts in /etc/revtunnel/client.toml.
func (s *Server) machineClientConfig(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "machine_id")
	if err != nil {
		return err
	}
	cfg, err := s.machines.ClientConfig(r.Context(), id, s.fallbackHost(r))
	if err != nil {
		return domainError(err, "machine")
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte(cfg))
	return nil
}

// selfDelete: the machine's uninstall script, authenticated by its agent token.
func (s *Server) selfDelete(w http.ResponseWriter, r *http.Request) error {
	tok := bearer(r)
	if tok == "" {
		return Errorf(http.StatusUnauthorized, "agent token required")
	}
	name, err := s.machines.SelfDelete(r.Context(), tok)
	if errors.Is(err, machines.ErrInvalidToken) {
		return Errorf(http.StatusUnauthorized, "invalid agent token")
	}
	if err != nil {
		return domainError(err, "machine")
	}
	s.record(r, auditMachineDeleted, fmt.Sprintf("machine %q deleted itself (its uninstall script)", name))
	writeData(w, http.StatusOK, message("machine deleted"))
	return nil
}

func (s *Server) listTunnels(w http.ResponseWriter, r *http.Request) error {
	v := r.URL.Query()
	lp, paged, err := readListParams(v, "tunnel list", []listFilter{{"kind", machines.TunnelKinds}, {"state", machines.TunnelStates}}, []string{"machine_id"})
	if err != nil {
		return err
	}
	q := machines.TunnelQuery{Limit: lp.limit, After: lp.after, Search: lp.search, Kind: v.Get("kind"), State: v.Get("state")}
	if x := v.Get("machine_id"); x != "" {
		id, err := strconv.ParseInt(x, 10, 64)
		if err != nil || id <= 0 {
			return Errorf(http.StatusBadRequest, "machine_id must be a positive integer")
		}
		q.MachineID = id
	}
	// A page is of every tunnel (its counts are), filtered by machine there.
	of := q.MachineID
	if paged {
		of = 0
	}
	ts, err := s.machines.Tunnels(r.Context(), of)
	if err != nil {
		return Internal("could not list the tunnels", err)
	}
	if !paged {
		writeData(w, http.StatusOK, ts)
		return nil
	}
	p := machines.SelectTunnels(ts, q)
	writePage(w, p.Items, pageInfo[machines.TunnelCounts]{Matched: p.Matched, NextCursor: p.Next, Counts: p.Counts})
	return nil
}

func (s *Server) createTunnel(w http.ResponseWriter, r *http.Request) error {
	var body machines.TunnelInput
	if err := decode(r, &body); err != nil {
		return err
	}
	if err := s.ssoGateWorks(r, body); err != nil {
		return err
	}
	t, err := s.machines.CreateTunnel(r.Context(), body)
	if err != nil {
		return domainError(err, "tunnel")
	}
	s.record(r, auditTunnelCreated, tunnelCreated(t))
	writeData(w, http.StatusCreated, t)
	return nil
}

// errSSOGateOff refuses an access gate of mode sso while single sign-on
// is not on: nobody could sign in to the site.
var errSSOGateOff = Errorf(http.StatusBadRequest, `access: "sso" needs single sign-on, which is not on here: `+
	`set it up in Security → Single sign-on first`)

// ssoGateWorks refuses a tunnel change that asks for access "sso" while
// single sign-on is not configured and on.
func (s *Server) ssoGateWorks(r *http.Request, in machines.TunnelInput) error {
	if in.Access == nil || *in.Access != gate.SSO {
		return nil
	}
	st, err := s.sso.Get(r.Context())
	if err != nil {
		return Internal("could not read the single sign-on settings", err)
	}
	if !st.Enabled {
		return errSSOGateOff
	}
	return nil
}

func (s *Server) getTunnel(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "tunnel_id")
	if err != nil {
		return err
	}
	t, err := s.machines.Tunnel(r.Context(), id)
	if err != nil {
		return domainError(err, "tunnel")
	}
	writeData(w, http.StatusOK, t)
	return nil
}

func (s *Server) updateTunnel(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "tunnel_id")
	if err != nil {
		return err
	}
	var body machines.TunnelInput
	if err := decode(r, &body); err != nil {
		return err
	}
	old, err := s.machines.Tunnel(r.Context(), id)
	if err != nil {
		return domainError(err, "tunnel")
	}
	if err := s.ssoGateWorks(r, body); err != nil {
		return err
	}
	t, err := s.machines.UpdateTunnel(r.Context(), id, body)
	if err != nil {
		return domainError(err, "tunnel")
	}
	s.recordTunnelUpdate(r, old, t, body)
	writeData(w, http.StatusOK, t)
	return nil
}

func (s *Server) deleteTunnel(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "tunnel_id")
	if err != nil {
		return err
	}
	t, err := s.machines.Tunnel(r.Context(), id)
	if err != nil {
		return domainError(err, "tunnel")
	}
	if err := s.machines.DeleteTunnel(r.Context(), id); err != nil {
		return domainError(err, "tunnel")
	}
	s.record(r, auditTunnelDeleted, tunnelDeleted(t))
	writeData(w, http.StatusOK, message("tunnel deleted"))
	return nil
}

func (s *Server) activity(w http.ResponseWriter, r *http.Request) error {
	if v := r.URL.Query().Get("machine_id"); v != "" {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id <= 0 {
			return Errorf(http.StatusBadRequest, "machine_id must be a positive integer")
		}
		es, err := s.machines.MachineActivity(r.Context(), id)
		if err != nil {
			return domainError(err, "machine")
		}
		writeData(w, http.StatusOK, es)
		return nil
	}
	es, err := s.machines.Activity(r.Context())
	if err != nil {
		return Internal("could not read the activity", err)
	}
	writeData(w, http.StatusOK, es)
	return nil
}

// revtunnelServerFile: spec §4.4 GET /api/debug/revtunnel-server.
func (s *Server) revtunnelServerFile(w http.ResponseWriter, r *http.Request) error {
	cfg, err := s.revtunnel.Render(r.Context())
	if err != nil {
		return Internal("could not render the tunnel server configuration", err)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte(cfg))
	return nil
}

// reconcile: spec §4.2 POST /api/local/reconcile. A refused config answers
// 500 with frps's own words; the deployed file stays as it was.
func (s *Server) reconcile(w http.ResponseWriter, r *http.Request) error {
	msg, err := s.revtunnel.Reconcile(r.Context())
	if err != nil {
		return &Error{Status: http.StatusInternalServerError, Msg: "reconcile failed: " + err.Error(), Err: err}
	}
	writeData(w, http.StatusOK, message(msg))
	return nil
}

// Prober checks an http tunnel through the web proxy and stores the result
// (package probe implements it).
type Prober interface {
	Probe(ctx context.Context, tunnelID int64) (store.TunnelProbe, error)
}

// probeTunnel: POST /api/tunnels/{id}/probe.
func (s *Server) probeTunnel(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "tunnel_id")
	if err != nil {
		return err
	}
	if _, err := s.prober.Probe(r.Context(), id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return Errorf(http.StatusNotFound, "tunnel not found")
		}
		var in interface{ ProbeInputError() }
		if errors.As(err, &in) {
			return Errorf(http.StatusBadRequest, "%s", err.Error())
		}
		return Internal("could not probe the tunnel", err)
	}
	t, err := s.machines.Tunnel(r.Context(), id)
	if err != nil {
		return domainError(err, "tunnel")
	}
	writeData(w, http.StatusOK, t)
	return nil
}

// rejoin: POST /api/machines/rejoin (public, Bearer agent token,
// rate-limited per address). The answer is /api/bootstrap's for the same
// machine, with a fresh agent token, plus "rejoined" and "machine_id".
func (s *Server) rejoin(w http.ResponseWriter, r *http.Request) error {
	tok := bearer(r)
	reg, err := s.machines.Rejoin(r.Context(), machines.RejoinRequest{
		AgentToken: tok, Client: client(r).Addr, FallbackHost: s.fallbackHost(r),
	})
	if err := agentCallError(w, err, "rejoin"); err != nil {
		return err
	}
	detail := fmt.Sprintf("machine %q rejoined (tunnel port %d kept); agent token replaced", reg.Name, reg.TunnelPort)
	if reg.OldClientAddr != reg.ClientAddr && reg.ClientAddr != "" {
		detail += fmt.Sprintf("; address %s → %s", orNone(reg.OldClientAddr), reg.ClientAddr)
	}
	if reg.OldSSHKeyID != reg.SSHKeyID && reg.SSHKeyID != "" {
		detail += fmt.Sprintf("; VPS key %s → %s", orNone(reg.OldSSHKeyID), reg.SSHKeyID)
	}
	s.record(r, auditMachineRejoined, detail)
	writeData(w, http.StatusOK, reg)
	return nil
}

// chooseTransport: POST /api/machines/transport (public, Bearer agent
// token, rate-limited per address) {transport: "tcp" | "wss"}: the machine
// says how its tunnel client can reach the tunnel server, and gets the
// config to install.
func (s *Server) chooseTransport(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Transport *string `json:"transport"`
	}
	if err := decode(r, &in); err != nil {
		return err
	}
	if in.Transport == nil {
		return Errorf(http.StatusBadRequest, "transport required (\"tcp\" or \"wss\")")
	}
	tok := bearer(r)
	got, err := s.machines.ChooseTransport(r.Context(), machines.TransportRequest{
		AgentToken: tok, Transport: *in.Transport, Client: client(r).Addr, FallbackHost: s.fallbackHost(r),
	})
	if err := agentCallError(w, err, "machine"); err != nil {
		return err
	}
	s.record(r, auditMachineTransport, fmt.Sprintf("machine #%d chose the %s transport", got.MachineID, got.Transport))
	writeData(w, http.StatusOK, got)
	return nil
}

// agentCallError answers a machine's own call authenticated by its agent
// token (the rejoin, its choice of transport): an unknown token is 401, a
// limited address 429 with Retry-After, anything else the domain's answer
// for what.
func agentCallError(w http.ResponseWriter, err error, what string) error {
	var limited *auth.RateLimitedError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, machines.ErrInvalidToken):
		return Errorf(http.StatusUnauthorized, "%s", rejoinRefused)
	case errors.As(err, &limited):
		w.Header().Set("Retry-After", strconv.Itoa(limited.RetryAfter))
		return Errorf(http.StatusTooManyRequests, "%s", limited.Error())
	}
	return domainError(err, what)
}

// rejoinRefused is the 401 of a rejoin with a token no machine holds.
const rejoinRefused = "unknown agent token: no machine holds it (deleted, or rejoined since); " +
	"join this machine again with a new token from the dashboard (Machines > Add machine)"

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// rejoinCommand is the one line that re-runs the join on a machine that
// is already joined (its agent predates fleet updates): it keeps the
// machine's id, name, ports and tunnels, and needs no token. Built on the
// join base URL, as the join command is; an error says why there is none.
func (s *Server) rejoinCommand(r *http.Request) (string, error) {
	base, _, err := s.joinBase(r)
	if err != nil {
		return "", err
	}
	u, err := checkBaseURL(base)
	if err != nil {
		return "", Errorf(http.StatusBadRequest, "cannot build the rejoin command: the dashboard address %q is %v; open the dashboard by its host name or IP address, or set --base-url", base, err)
	}
	return machines.RejoinCommand(u), nil
}

// DomainDNS is what GET /api/tunnels/{id}/dns found for one of the
// tunnel's own domains.
type DomainDNS struct {
	Domain     string `json:"domain"`
	OK         bool   `json:"ok"`
	ResolvedTo string `json:"resolved_to,omitempty"`
	Message    string `json:"message,omitempty"`
}

// checkTunnelDNS: GET /api/tunnels/{id}/dns checks that each of an http
// tunnel's own domains resolves to this server, as check-dns does for
// router.<domain>, all at once.
func (s *Server) checkTunnelDNS(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "tunnel_id")
	if err != nil {
		return err
	}
	t, err := s.machines.Tunnel(r.Context(), id)
	if err != nil {
		return domainError(err, "tunnel")
	}
	if t.Kind != "http" {
		return Errorf(http.StatusBadRequest, "only http tunnels have domains")
	}
	if t.URL == nil || *t.URL == "" || t.Subdomain == nil {
		return Errorf(http.StatusBadRequest, "no domain is set yet: finish the set-up first")
	}
	domain := strings.TrimPrefix(*t.URL, "https://"+*t.Subdomain+".")
	out := make([]DomainDNS, len(t.Domains))
	var wg sync.WaitGroup
	for i, d := range t.Domains {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.net.CheckName(r.Context(), d.Name, domain)
			out[i] = DomainDNS{Domain: d.Name, OK: res.OK, ResolvedTo: res.ResolvedTo, Message: res.Message}
			if err != nil {
				out[i].Message = err.Error()
			}
		}()
	}
	wg.Wait()
	writeData(w, http.StatusOK, out)
	return nil
}
