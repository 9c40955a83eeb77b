package site

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/notify"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Cluster is the cluster's state as export and apply see it.
type Cluster struct {
	Domain   string
	Machines []machines.Machine
	// Tunnels are the API's views, their access included.
	Tunnels []machines.Tunnel
	// Webhook is nil when none is set.
	Webhook *Webhook
}

// Export is the cluster as a file. The webhook's URL is Kept (it often
// holds a secret), and so is a gate's password.
func Export(c Cluster) Spec {
	s := Spec{Version: Version, Domain: c.Domain, Tunnels: []Tunnel{}}
	for _, m := range c.Machines {
		s.Machines = append(s.Machines, m.Name)
	}
	slices.Sort(s.Machines)
	for _, t := range c.Tunnels {
		s.Tunnels = append(s.Tunnels, FromView(t))
	}
	s.Tunnels = Sorted(s.Tunnels)
	if c.Webhook != nil {
		w := *c.Webhook
		w.URL = Kept
		s.Webhook = &w
	}
	return s
}

// FromView is one tunnel as the file writes it.
func FromView(v machines.Tunnel) Tunnel {
	t := Tunnel{Name: v.Name, Machine: v.MachineName, Kind: v.Kind, Port: v.LocalPort, Public: v.Public, Paused: v.Paused,
		Access: v.Access, AllowIPs: v.AllowIPs, SSOAllow: v.SSOAllow, RememberDays: v.RememberDays,
		Balance: v.Balance, Domains: nil, ProxyProtocol: v.ProxyProtocol}
	if v.Subdomain != nil {
		t.Subdomain = *v.Subdomain
	}
	if v.HasPassword {
		t.Password = Kept
	}
	for _, r := range v.Rules {
		t.Rules = append(t.Rules, Rule{Path: r.Path, Action: r.Action})
	}
	if len(v.Targets) > 1 {
		for _, tg := range v.Targets[1:] {
			t.Targets = append(t.Targets, Target{Machine: tg.MachineName, Port: tg.LocalPort})
		}
	}
	if v.Health != nil {
		t.Health = &Health{Path: v.Health.Path, IntervalS: v.Health.IntervalS, ExpectStatus: v.Health.ExpectStatus}
	}
	for _, d := range v.Domains {
		t.Domains = append(t.Domains, d.Name)
	}
	if v.Fallback != nil {
		t.Fallback = v.Fallback.Message
	}
	t.Normalize()
	return t
}

// Op is what a change does.
type Op string

// The three kinds of change, as apply prints them.
const (
	Create Op = "+"
	Update Op = "~"
	Delete Op = "-"
)

// Change is one line of an apply: a tunnel created, changed or removed, or
// the webhook set.
type Change struct {
	Op    Op
	Place Place
	// Tunnel changes: Old is the cluster's view (nil for Create), New the
	// view the change leads to (for its words), Input what the API is
	// asked (only the fields that change).
	Old, New *machines.Tunnel
	Input    machines.TunnelInput
	// Webhook is the webhook's new settings (nil: not a webhook change).
	Webhook *Webhook
}

// PasswordCheck reports whether pw is the password tunnel id's gate has.
type PasswordCheck func(tunnelID int64, pw string) (bool, error)

// Plan is what apply would change for the file p on the cluster c: every
// refusal it can find without the store names its place. Tunnels the file
// does not name are removed only with prune.
func Plan(p Parsed, c Cluster, prune bool, same PasswordCheck) ([]Change, error) {
	s := p.Spec
	if s.Domain != "" && c.Domain != "" && !strings.EqualFold(strings.TrimSuffix(s.Domain, "."), c.Domain) {
		return nil, &PlaceError{p.Domain, fmt.Errorf("the file is for %q, and this cluster's domain is %q: apply does not move a cluster to another domain (its set-up does)", s.Domain, c.Domain)}
	}
	ids := map[string]int64{}
	for _, m := range c.Machines {
		ids[strings.ToLower(m.Name)] = m.ID
	}
	for i, name := range s.Machines {
		if _, ok := ids[strings.ToLower(strings.TrimSpace(name))]; !ok && i < len(p.Machines) {
			return nil, &PlaceError{p.Machines[i], fmt.Errorf("machine %q has not joined this cluster: apply does not join machines (docs/machines.md)", name)}
		}
	}
	have := map[string]machines.Tunnel{}
	for _, t := range c.Tunnels {
		have[FromView(t).Key()] = t
	}
	var out []Change
	seen := map[string]int{}
	for i, want := range s.Tunnels {
		want.Normalize()
		place := p.Tunnels[i]
		if j, ok := seen[want.Key()]; ok {
			return nil, &PlaceError{place, fmt.Errorf("tunnel %q on %q is named twice (also tunnels[%d])", want.Name, want.Machine, j)}
		}
		seen[want.Key()] = i
		ch, err := planTunnel(want, have, ids, same)
		var cf checkFailed
		if errors.As(err, &cf) {
			return nil, cf.err // not the file's fault: the API words it
		}
		if err != nil {
			return nil, &PlaceError{place, err}
		}
		if ch != nil {
			ch.Place = place
			out = append(out, *ch)
		}
	}
	if prune {
		for _, t := range c.Tunnels {
			if _, ok := seen[FromView(t).Key()]; !ok {
				old := t
				out = append(out, Change{Op: Delete, Old: &old, Place: Place{Path: "not in the file"}})
			}
		}
	}
	if w, err := planWebhook(s.Webhook, c.Webhook); err != nil {
		return nil, &PlaceError{p.Webhook, err}
	} else if w != nil {
		out = append(out, Change{Op: Update, Place: p.Webhook, Webhook: w})
	}
	return out, nil
}

// checkFailed is a password check that could not be made (the store, the
// hashing bound): the request's failure, not the file's.
type checkFailed struct{ err error }

func (c checkFailed) Error() string { return c.err.Error() }

// planTunnel is the change one tunnel of the file asks for (nil: none).
func planTunnel(want Tunnel, have map[string]machines.Tunnel, ids map[string]int64, same PasswordCheck) (*Change, error) {
	if want.Name == "" {
		return nil, errors.New("name is required")
	}
	if err := onlyWhereMeant(want); err != nil {
		return nil, err
	}
	mid, ok := ids[want.Machine]
	if !ok {
		if want.Machine == "" {
			return nil, errors.New("machine is required")
		}
		return nil, fmt.Errorf("machine %q has not joined this cluster", want.Machine)
	}
	for i, tg := range want.Targets {
		if _, ok := ids[tg.Machine]; !ok {
			return nil, fmt.Errorf("targets[%d]: machine %q has not joined this cluster", i, tg.Machine)
		}
	}
	old, exists := have[want.Key()]
	if !exists {
		if want.Password == Kept {
			return nil, errors.New("password " + Kept + " keeps a password, and this tunnel has none yet: give one")
		}
		in := Input(want, mid, ids)
		nv := predict(machines.Tunnel{}, want, mid, ids)
		return &Change{Op: Create, New: &nv, Input: in}, nil
	}
	cur := FromView(old)
	if want.Kind != cur.Kind {
		return nil, fmt.Errorf("kind %s → %s cannot be changed: give the tunnel another name (and prune the old one)", cur.Kind, want.Kind)
	}
	pwChanged := false
	if want.Password != "" && want.Password != Kept {
		ok, err := same(old.ID, want.Password)
		if err != nil {
			return nil, checkFailed{err}
		}
		pwChanged = !ok
	}
	if Same(cur, want) && !pwChanged {
		return nil, nil
	}
	in := Input(want, mid, ids)
	if !pwChanged {
		in.Password = nil
	}
	nv := predict(old, want, mid, ids)
	o := old
	return &Change{Op: Update, Old: &o, New: &nv, Input: in}, nil
}

// onlyWhereMeant refuses the fields want's kind or gate does not take,
// which the API would otherwise never be asked about (and every apply
// would show as a change).
func onlyWhereMeant(want Tunnel) error {
	if want.Kind != "http" {
		var named []string
		for _, f := range []struct {
			name string
			set  bool
		}{{"subdomain", want.Subdomain != ""}, {"access", want.Access != ""}, {"password", want.Password != ""},
			{"allow_ips", len(want.AllowIPs) > 0}, {"sso_allow", len(want.SSOAllow) > 0}, {"rules", len(want.Rules) > 0},
			{"remember_days", want.RememberDays != 0}, {"targets", len(want.Targets) > 0}, {"balance", want.Balance != ""},
			{"health", want.Health != nil}, {"domains", len(want.Domains) > 0}, {"fallback", want.Fallback != ""}} {
			if f.set {
				named = append(named, f.name)
			}
		}
		if len(named) > 0 {
			return fmt.Errorf("%s: only for http tunnels, and this one is %s", strings.Join(named, ", "), want.Kind)
		}
		return nil
	}
	if len(want.SSOAllow) > 0 && want.Access != "sso" {
		return errors.New(`sso_allow is only for access "sso"`)
	}
	if want.Password != "" && want.Access != "password" {
		return errors.New(`password is only for access "password"`)
	}
	return nil
}

// Input is what the API is asked for want: every declarable field, so
// that a field the file leaves out goes back to its default.
func Input(want Tunnel, mid int64, ids map[string]int64) machines.TunnelInput {
	in := machines.TunnelInput{MachineID: &mid, Name: ptr(want.Name), Kind: ptr(want.Kind), LocalPort: ptr(want.Port),
		Public: ptr(want.Public), Paused: ptr(want.Paused), ProxyProtocol: ptr(want.ProxyProtocol)}
	if want.Kind != "http" {
		return in
	}
	in.Subdomain = ptr(want.Subdomain)
	access := want.Access
	if access == "" {
		access = "public"
	}
	in.Access = &access
	if want.Password != "" && want.Password != Kept {
		in.Password = ptr(want.Password)
	}
	in.AllowIPs = ptr(orEmpty(want.AllowIPs))
	if access == "sso" {
		in.SSOAllow = ptr(orEmpty(want.SSOAllow))
	}
	rules := []store.AccessRule{}
	for _, r := range want.Rules {
		rules = append(rules, store.AccessRule{Path: r.Path, Action: r.Action})
	}
	in.Rules = &rules
	in.RememberDays = ptr(want.RememberDays)
	targets := []machines.TargetInput{{MachineID: mid, LocalPort: want.Port}}
	for _, tg := range want.Targets {
		targets = append(targets, machines.TargetInput{MachineID: ids[tg.Machine], LocalPort: tg.Port})
	}
	in.Targets = &targets
	balance := want.Balance
	if balance == "" {
		balance = "failover"
	}
	in.Balance = &balance
	h := machines.HealthInput{}
	if want.Health != nil {
		h = machines.HealthInput{Path: want.Health.Path, IntervalS: want.Health.IntervalS, ExpectStatus: want.Health.ExpectStatus}
	}
	in.Health = &h
	in.Domains = ptr(orEmpty(want.Domains))
	in.Fallback = &machines.FallbackView{Message: want.Fallback}
	return in
}

// predict is the view old becomes once want is applied: what the change's
// words are written from.
func predict(old machines.Tunnel, want Tunnel, mid int64, ids map[string]int64) machines.Tunnel {
	names := map[int64]string{}
	for n, id := range ids {
		names[id] = n
	}
	v := old
	v.MachineID, v.MachineName, v.Name, v.Kind, v.LocalPort = mid, want.Machine, want.Name, want.Kind, want.Port
	v.Public, v.Paused, v.ProxyProtocol = want.Public, want.Paused, want.ProxyProtocol
	if want.Kind != "http" {
		return v
	}
	sub := want.Subdomain
	v.Subdomain = &sub
	v.Access = want.Access
	if v.Access == "" {
		v.Access = "public"
	}
	v.HasPassword = v.Access == "password" && (want.Password != "" || old.HasPassword)
	v.AllowIPs, v.SSOAllow, v.RememberDays = want.AllowIPs, want.SSOAllow, want.RememberDays
	v.Rules = nil
	for _, r := range want.Rules {
		v.Rules = append(v.Rules, store.AccessRule{Path: r.Path, Action: r.Action})
	}
	v.Targets = []machines.TargetView{{MachineID: mid, MachineName: want.Machine, LocalPort: want.Port}}
	for _, tg := range want.Targets {
		v.Targets = append(v.Targets, machines.TargetView{MachineID: ids[tg.Machine], MachineName: names[ids[tg.Machine]], LocalPort: tg.Port})
	}
	v.Balance = want.Balance
	if v.Balance == "" {
		v.Balance = "failover"
	}
	v.Health = nil
	if want.Health != nil {
		v.Health = &machines.HealthView{Path: want.Health.Path, IntervalS: want.Health.IntervalS, ExpectStatus: want.Health.ExpectStatus}
	}
	v.Domains = nil
	for _, d := range want.Domains {
		v.Domains = append(v.Domains, machines.DomainView{Name: d})
	}
	v.Fallback = nil
	if want.Fallback != "" {
		v.Fallback = &machines.FallbackView{Message: want.Fallback}
	}
	return v
}

// planWebhook is the webhook's new settings, nil when the file leaves it
// as it is (absent, or the same).
func planWebhook(want, have *Webhook) (*Webhook, error) {
	if want == nil {
		return nil, nil
	}
	w := *want
	if w.URL == Kept {
		if have == nil || have.URL == "" {
			return nil, errors.New("url " + Kept + " keeps a webhook, and none is set yet: give its URL")
		}
		w.URL = have.URL
	}
	// As the notifier keeps it: the URL trimmed, the defaults filled in.
	set := notify.Settings{URL: w.URL, Preset: w.Preset, OfflineMinutes: w.OfflineMinutes}
	if err := set.Validate(); err != nil {
		return nil, err
	}
	w = Webhook{URL: set.URL, Preset: set.Preset, OfflineMinutes: set.OfflineMinutes}
	if have != nil && *have == w {
		return nil, nil
	}
	return &w, nil
}

func ptr[T any](v T) *T { return &v }

func orEmpty(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}
