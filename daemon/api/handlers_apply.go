package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/notify"
	"github.com/tunnelsvc/tunnelsvc/daemon/site"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// auditApply is the one row an apply records, besides each change's own.
const auditApply = "APPLY"

// applyBody is POST /api/apply's body. Spec is the file's text (YAML or
// JSON), or the file as a JSON object.
type applyBody struct {
	Spec   json.RawMessage `json:"spec"`
	DryRun bool            `json:"dry_run"`
	Prune  bool            `json:"prune"`
}

// ApplyChange is one line of an apply's answer.
type ApplyChange struct {
	Op    site.Op `json:"op"`
	Text  string  `json:"text"`
	Place string  `json:"place"`
}

// ApplyResult is POST /api/apply's answer.
type ApplyResult struct {
	Changes []ApplyChange `json:"changes"`
	DryRun  bool          `json:"dry_run"`
	// Applied: the changes were made (false for a dry run and for none).
	Applied bool `json:"applied"`
	// Summary is the last line apply prints: "applied 2 changes", "no
	// changes", "dry run: 2 changes, none made".
	Summary string `json:"summary"`
}

// summarize sets res's Summary.
func (res *ApplyResult) summarize() {
	n := len(res.Changes)
	switch {
	case n == 0:
		res.Summary = "no changes"
	case res.DryRun:
		res.Summary = fmt.Sprintf("dry run: %d %s, none made", n, plural(n, "change", "changes"))
	default:
		res.Summary = fmt.Sprintf("applied %d %s", n, plural(n, "change", "changes"))
	}
}

// exportSite: GET /api/export, the cluster as a file.
func (s *Server) exportSite(w http.ResponseWriter, r *http.Request) error {
	c, err := s.cluster(r)
	if err != nil {
		return err
	}
	text, err := site.Marshal(site.Export(c))
	if err != nil {
		return Internal("could not write the file", err)
	}
	writeData(w, http.StatusOK, map[string]string{"yaml": string(text)})
	return nil
}

// applySchema: GET /api/apply/schema.json, the file's JSON Schema.
func (s *Server) applySchema(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/schema+json")
	w.Write(site.Schema)
	return nil
}

// cluster is the cluster's state as the file shows it.
func (s *Server) cluster(r *http.Request) (site.Cluster, error) {
	ctx := r.Context()
	var c site.Cluster
	var err error
	if c.Machines, err = s.machines.Machines(ctx, s.fallbackHost(r)); err != nil {
		return c, Internal("could not list the machines", err)
	}
	if c.Tunnels, err = s.machines.Tunnels(ctx, 0); err != nil {
		return c, Internal("could not list the tunnels", err)
	}
	if c.Domain, err = s.setup.Settings.Domain(ctx); err != nil {
		return c, Internal("could not read the domain", err)
	}
	if s.mon.Notify != nil {
		set, err := notify.Load(ctx, s.mon.Notify.Store)
		if err != nil {
			return c, Internal("could not read the notification settings", err)
		}
		if set.URL != "" {
			c.Webhook = &site.Webhook{URL: set.URL, Preset: set.Preset, OfflineMinutes: set.OfflineMinutes}
		}
	}
	return c, nil
}

// applySite: POST /api/apply. Every change is checked first, then all are
// made in one transaction; a refusal names its place in the file.
func (s *Server) applySite(w http.ResponseWriter, r *http.Request) error {
	var body applyBody
	if err := decode(r, &body); err != nil {
		return err
	}
	p, err := parseSpec(body.Spec)
	if err != nil {
		return Errorf(http.StatusBadRequest, "%s", err.Error())
	}
	c, err := s.cluster(r)
	if err != nil {
		return err
	}
	compared := 0
	plan, err := site.Plan(p, c, body.Prune, func(id int64, pw string) (bool, error) {
		compared++
		return s.samePassword(r, id, pw, body.DryRun)
	})
	if compared > 0 && body.DryRun {
		// A dry run's "no changes" would tell a gate's password: its
		// comparisons are on record, and wrong ones count as failures.
		s.record(r, auditApply, fmt.Sprintf("dry run of a site file compared %d gate %s", compared, plural(compared, "password", "passwords")))
	}
	var limited *auth.RateLimitedError
	if errors.As(err, &limited) {
		return loginError(w, err)
	}
	if err != nil {
		return applyError(err)
	}
	res := ApplyResult{Changes: []ApplyChange{}, DryRun: body.DryRun}
	for _, ch := range plan {
		res.Changes = append(res.Changes, ApplyChange{Op: ch.Op, Text: changeWords(ch), Place: ch.Place.String()})
	}
	res.summarize()
	if len(plan) == 0 {
		writeData(w, http.StatusOK, res)
		return nil
	}
	if err := s.applyPlan(r, plan, body.DryRun); err != nil {
		return err
	}
	res.Applied = !body.DryRun
	writeData(w, http.StatusOK, res)
	return nil
}

// samePassword reports whether pw is tunnel id's gate password. In a dry
// run, where no change follows, a wrong one counts against the client's
// address like a wrong password at the login (429 past the limit).
func (s *Server) samePassword(r *http.Request, id int64, pw string, dryRun bool) (bool, error) {
	a, err := s.machines.Store.TunnelAccessOf(r.Context(), id)
	if err != nil || a.PasswordHash == "" {
		return false, err
	}
	c := client(r)
	if !dryRun || !c.Addr.IsValid() {
		return auth.VerifyClientPassword(r.Context(), c, a.PasswordHash, pw)
	}
	res, err := s.auth.Reserve(r.Context(), c)
	if err != nil {
		return false, err
	}
	ok, err := auth.VerifyClientPassword(r.Context(), c, a.PasswordHash, pw)
	if ok {
		res.Release()
	}
	return ok, err
}

// parseSpec reads the body's spec: the file's text, or the file as an
// object.
func parseSpec(raw json.RawMessage) (site.Parsed, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return site.Parsed{}, errors.New("spec is required: the file's text")
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		text = string(raw)
	}
	return site.Parse([]byte(text))
}

// applyError is a plan's refusal as the API answers it.
func applyError(err error) error {
	var pe *site.PlaceError
	if errors.As(err, &pe) {
		return Errorf(http.StatusBadRequest, "%s", err.Error())
	}
	return domainError(err, "site")
}

// applyPlan makes plan's changes, all or none (none with dryRun, after the
// database checked them), and records them.
func (s *Server) applyPlan(r *http.Request, plan []site.Change, dryRun bool) error {
	ops, settings, opOf, err := s.applyOps(r, plan)
	if err != nil {
		return err
	}
	ids, err := s.machines.ApplyTunnels(r.Context(), ops, settings, dryRun)
	var oe *machines.OpError
	if errors.As(err, &oe) {
		i := len(plan) - 1
		if oe.Index < len(opOf) {
			i = opOf[oe.Index]
		}
		return placed(plan[i], domainError(oe.Err, "tunnel"))
	}
	if err != nil {
		return domainError(err, "site")
	}
	if dryRun {
		return nil
	}
	s.record(r, auditApply, fmt.Sprintf("applied a site file: %d %s", len(plan), plural(len(plan), "change", "changes")))
	for i, op := range ops {
		s.recordApplied(r, plan[opOf[i]], ids[i], op)
	}
	for _, ch := range plan {
		if ch.Webhook != nil {
			s.record(r, KindNotifyChanged, "webhook set by a site file (preset "+ch.Webhook.Preset+")")
		}
	}
	return nil
}

// applyOps turns plan into the tunnel ops and the settings of one batch;
// opOf[i] is the change of ops[i].
func (s *Server) applyOps(r *http.Request, plan []site.Change) ([]machines.TunnelOp, []store.SettingWrite, []int, error) {
	var ops []machines.TunnelOp
	var settings []store.SettingWrite
	var opOf []int
	for i, ch := range plan {
		switch {
		case ch.Webhook != nil:
			set := notify.Settings{URL: ch.Webhook.URL, Preset: ch.Webhook.Preset, OfflineMinutes: ch.Webhook.OfflineMinutes}
			kv, err := notify.Setting(&set)
			var bad notify.InputError
			if errors.As(err, &bad) {
				return nil, nil, nil, Errorf(http.StatusBadRequest, "%s: %s", ch.Place, bad.Error())
			}
			settings = append(settings, kv)
			continue
		case ch.Op == site.Delete:
			ops = append(ops, machines.TunnelOp{ID: ch.Old.ID, Delete: true})
		case ch.Op == site.Create:
			if err := s.ssoGateWorks(r, ch.Input); err != nil {
				return nil, nil, nil, placed(ch, err)
			}
			ops = append(ops, machines.TunnelOp{In: ch.Input})
		default:
			if err := s.ssoGateWorks(r, ch.Input); err != nil && ch.Old.Access != "sso" {
				return nil, nil, nil, placed(ch, err)
			}
			ops = append(ops, machines.TunnelOp{ID: ch.Old.ID, In: ch.Input})
		}
		opOf = append(opOf, i)
	}
	return ops, settings, opOf, nil
}

// recordApplied records one applied change as the API's own route would.
func (s *Server) recordApplied(r *http.Request, ch site.Change, id int64, op machines.TunnelOp) {
	if ch.Op == site.Delete {
		s.record(r, auditTunnelDeleted, tunnelDeleted(*ch.Old))
		return
	}
	t, err := s.machines.Tunnel(r.Context(), id)
	switch {
	case err != nil:
	case ch.Op == site.Create:
		s.record(r, auditTunnelCreated, tunnelCreated(t))
	default:
		s.recordTunnelUpdate(r, *ch.Old, t, op.In)
	}
}

// changeWords is one change as apply prints it:
//
//   - tunnel grafana on nas (http 3000)
//     ~ tunnel files: access public → operators only
//   - tunnel old on nas (tcp 5432)
func changeWords(ch site.Change) string {
	if ch.Webhook != nil {
		return fmt.Sprintf("~ webhook: %s, preset %s, offline after %d min", webhookWords(ch.Webhook.URL), ch.Webhook.Preset, ch.Webhook.OfflineMinutes)
	}
	switch ch.Op {
	case site.Create:
		return fmt.Sprintf("+ tunnel %s on %s (%s)", ch.New.Name, ch.New.MachineName, kindPort(*ch.New))
	case site.Delete:
		return fmt.Sprintf("- tunnel %s on %s (%s)", ch.Old.Name, ch.Old.MachineName, kindPort(*ch.Old))
	}
	words := tunnelChanges(*ch.Old, *ch.New, ch.Input)
	if ch.New.Paused != ch.Old.Paused {
		words = strings.TrimPrefix(words+"; paused "+yesNo(ch.Old.Paused)+" → "+yesNo(ch.New.Paused), "; ")
	}
	return fmt.Sprintf("~ tunnel %s on %s: %s", ch.Old.Name, ch.Old.MachineName, words)
}

// kindPort is "http 3000", "tcp 5432".
func kindPort(t machines.Tunnel) string { return fmt.Sprintf("%s %d", t.Kind, t.LocalPort) }

// plural is one or many by n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// placed is an API refusal of ch, said with its place in the file and
// the change's words; a server failure (5xx) stays as it is.
func placed(ch site.Change, err error) error {
	var e *Error
	if !errors.As(err, &e) || e.Status >= 500 {
		return err
	}
	return Errorf(e.Status, "%s: %s: %s", ch.Place, changeWords(ch), fileWords(e.Msg))
}

// apiTarget is the API's numbering of an http tunnel's targets, whose
// targets[0] is the tunnel's own machine and port.
var apiTarget = regexp.MustCompile(`targets\[(\d+)\]`)

// fileWords is an API refusal in the file's names: its port is the API's
// local_port, and its targets are the other machines, so the API's
// targets[0] is the tunnel's port and its targets[1] the file's targets[0].
func fileWords(msg string) string {
	msg = strings.ReplaceAll(msg, "local_port", "port")
	return apiTarget.ReplaceAllStringFunc(msg, func(m string) string {
		n, _ := strconv.Atoi(apiTarget.FindStringSubmatch(m)[1])
		if n == 0 {
			return "port"
		}
		return fmt.Sprintf("targets[%d]", n-1)
	})
}
