package machines

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
)

// An http tunnel may also be served at names of the operator's own
// domains (app.example.org), besides <subdomain>.<domain>: Caddy obtains
// their certificates like the others once their DNS points at this server.

// MaxDomains bounds a tunnel's own domains.
const MaxDomains = 16

// ConflictError is a value that another tunnel or the dashboard already
// has; the API answers 409 with its words.
type ConflictError string

func (e ConflictError) Error() string { return string(e) }

// DomainView is one of an http tunnel's own domains.
type DomainView struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	// DNS is the record that makes the name reach this server.
	DNS string `json:"dns"`
}

// planDomains checks in's domains for t: nil when unchanged, else the
// list to store (lower-case, without a final dot, each once). A domain
// whose owner gives it up in the same batch (freed) is not taken.
func (s *Service) planDomains(ctx context.Context, t store.Tunnel, in TunnelInput, freed func(owner int64, domain string) bool) (*[]string, error) {
	if in.Domains == nil {
		return nil, nil
	}
	if t.Kind != "http" {
		return nil, InputError("domains are only for http tunnels")
	}
	if len(*in.Domains) > MaxDomains {
		return nil, InputError(fmt.Sprintf("domains may name at most %d names", MaxDomains))
	}
	x, err := s.exposure(ctx, "")
	if err != nil {
		return nil, err
	}
	ours := strings.ToLower(x.Domain)
	out := []string{}
	for i, d := range *in.Domains {
		d = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(d)), ".")
		if err := validate.Domain(d); err != nil || !strings.Contains(d, ".") {
			return nil, InputError(fmt.Sprintf("domains[%d] %q is not a fully qualified domain name", i, d))
		}
		for j, e := range out {
			if e == d {
				return nil, InputError(fmt.Sprintf("domains[%d] repeats domains[%d]", i, j))
			}
		}
		if ours != "" {
			if d == "router."+ours {
				return nil, ConflictError(fmt.Sprintf("%s is the dashboard's address", d))
			}
			if sub, ok := strings.CutSuffix(d, "."+ours); ok && !strings.Contains(sub, ".") {
				if sub == t.Subdomain {
					return nil, InputError(fmt.Sprintf("%s is already this tunnel's address", d))
				}
				if other, err := s.tunnelBySubdomain(ctx, sub); err == nil {
					return nil, ConflictError(fmt.Sprintf("%s is the address of tunnel %q", d, other.Name))
				}
				return nil, InputError(fmt.Sprintf("%s is under this server's domain: make %q the tunnel's subdomain instead", d, sub))
			}
		}
		if owner, err := s.Store.DomainOwner(ctx, d); err == nil && owner != t.ID && (freed == nil || !freed(owner, d)) {
			name := fmt.Sprint(owner)
			if o, err := s.Store.GetTunnel(ctx, owner); err == nil {
				name = fmt.Sprintf("%q", o.Name)
			}
			return nil, ConflictError(fmt.Sprintf("domain %s is already used by tunnel %s", d, name))
		} else if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		out = append(out, d)
	}
	return &out, nil
}

// tunnelBySubdomain finds the http tunnel at sub.<domain>.
func (s *Service) tunnelBySubdomain(ctx context.Context, sub string) (store.Tunnel, error) {
	ts, err := s.Store.ListTunnels(ctx, 0)
	if err != nil {
		return store.Tunnel{}, err
	}
	for _, t := range ts {
		if t.Kind == "http" && t.Subdomain == sub {
			return t, nil
		}
	}
	return store.Tunnel{}, store.ErrNotFound
}

// domainViews is t's own domains as the API shows them.
func (c tunnelContext) domainViews(t store.Tunnel) []DomainView {
	var out []DomainView
	for _, d := range c.domains[t.ID] {
		dns := "a CNAME record to this server's name, or an A/AAAA record with its address"
		if c.x.Domain != "" {
			dns = fmt.Sprintf("a CNAME record %s → router.%s (or an A/AAAA record with the same address as router.%s)", d, c.x.Domain, c.x.Domain)
		}
		out = append(out, DomainView{Name: d, URL: "https://" + d, DNS: dns})
	}
	return out
}

// domainTaken turns the store's refusal of a taken domain into an answer.
func domainTaken(err error) error {
	var dt *store.DomainTakenError
	if errors.As(err, &dt) {
		return ConflictError(fmt.Sprintf("domain %s is already used by another tunnel", dt.Domain))
	}
	return err
}
