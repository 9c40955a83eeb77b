package machines

import (
	"context"
	"fmt"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
)

// Renderer renders machines' desired configs from what they are rendered
// from, read once: the tunnel CA, the cluster's edges, the tunnel host,
// and the tunnels and targets. One machine's config (DesiredConfig) reads
// that machine's tunnels and targets; a pass over every machine (the
// delivery reconciler's) reads everything once for all of them, instead
// of several queries a machine. One goroutine uses it.
type Renderer struct {
	s       *Service
	ca      *tunnelca.CA // read at the first render
	edges   []EdgeTarget // nil: this daemon is its cluster's only edge
	host    string       // the resolver's tunnel host (one edge only)
	tunnels map[int64][]store.Tunnel
	targets map[int64][]store.Target
}

// Renderer reads what every machine's config is rendered from.
func (s *Service) Renderer(ctx context.Context) (*Renderer, error) {
	return s.renderer(ctx, 0, "")
}

// renderer reads what machine id's config is rendered from (every
// machine's for id 0). fallbackHost is Dial's.
func (s *Service) renderer(ctx context.Context, id int64, fallbackHost string) (*Renderer, error) {
	r := &Renderer{s: s}
	var err error
	if r.edges, err = s.edgeTargets(ctx); err != nil {
		return nil, err
	}
	if r.edges == nil {
		if r.host, err = s.tunnelHost(ctx, fallbackHost); err != nil {
			return nil, err
		}
	}
	ts, err := s.Store.ListTunnels(ctx, id)
	if err != nil {
		return nil, err
	}
	tgs, err := s.Store.ListTargets(ctx, id)
	if err != nil {
		return nil, err
	}
	r.tunnels, r.targets = map[int64][]store.Tunnel{}, map[int64][]store.Target{}
	for _, t := range ts {
		r.tunnels[t.MachineID] = append(r.tunnels[t.MachineID], t)
	}
	for _, t := range tgs {
		r.targets[t.MachineID] = append(r.targets[t.MachineID], t)
	}
	return r, nil
}

// DesiredConfig is Service.DesiredConfig from what r read.
func (r *Renderer) DesiredConfig(ctx context.Context, m store.Machine) (cfg, server string, err error) {
	secret, err := r.secret(m)
	if err != nil {
		return "", "", err
	}
	return r.config(ctx, m, secret)
}

// config is machine m's main config with secret (a new one, at a rejoin),
// dialling where Dial says, and the server it names.
func (r *Renderer) config(ctx context.Context, m store.Machine, secret string) (cfg, server string, err error) {
	target, err := r.dial(m)
	if err != nil {
		return "", "", err
	}
	cfg, err = r.render(ctx, m, secret, target, "")
	return cfg, serverKey(target.Host, transportOf(m)), err
}

// DesiredEdges is Service.DesiredEdges from what r read.
func (r *Renderer) DesiredEdges(ctx context.Context, m store.Machine) ([]agent.EdgeClient, error) {
	if r.edges == nil {
		return nil, nil
	}
	home := HomeOf(m, r.edges)
	secret, err := r.secret(m)
	if err != nil {
		return nil, err
	}
	var out []agent.EdgeClient
	for _, e := range r.edges {
		if e.ID == home.ID || e.Host == "" || e.Port == 0 {
			continue
		}
		cfg, err := r.render(ctx, m, secret, e, e.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, agent.EdgeClient{Edge: e.Name, Config: cfg})
	}
	return out, nil
}

// dial is Dial's answer for machine m from what r read.
func (r *Renderer) dial(m store.Machine) (EdgeTarget, error) {
	return r.s.dial(m, r.edges, r.host)
}

// render is machine m's config for edge e (see renderClient), with the
// tunnel CA read at the first.
func (r *Renderer) render(ctx context.Context, m store.Machine, secret string, e EdgeTarget, edge string) (string, error) {
	if r.ca == nil {
		ca, err := r.s.TunnelCA(ctx)
		if err != nil {
			return "", err
		}
		r.ca = ca
	}
	return r.s.renderClient(r.ca, m, secret, e, edge, r.tunnels[m.ID], r.targets[m.ID])
}

// secret is machine m's opened frp secret.
func (r *Renderer) secret(m store.Machine) (string, error) {
	secret, err := r.s.Sealer.Open(m.SecretSealed, secretAAD(m.ID))
	if err != nil {
		return "", fmt.Errorf("machine %d credential: %w", m.ID, err)
	}
	return string(secret), nil
}
