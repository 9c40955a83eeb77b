package app

import (
	"context"

	"github.com/tunnelsvc/tunnelsvc/daemon/hostsync"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/visitorhop"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

// hostParts are the parts of this edge's own host the daemon renders and
// keeps as the database says: the tunnel server's config, the visitor
// hop's ports, the Caddyfile, the nft publish table and the firewall
// ruleset. Each Apply keeps the
// previous working configuration when its tool refuses the new one.
func (a *App) hostParts() []hostsync.Part {
	return []hostsync.Part{
		{
			Name: "frps", Label: "tunnel server config",
			Desired: func(ctx context.Context) ([]byte, bool, error) {
				s, err := a.Revtunnel.Render(ctx)
				return []byte(s), err == nil, err
			},
			Apply: func(ctx context.Context) error {
				msg, err := a.Revtunnel.Reconcile(ctx)
				if err == nil {
					a.Log.Debug(msg)
				}
				return err
			},
		},
		{
			// Before Caddy: the hop listens on a port before Caddy sends
			// requests there.
			Name: "visitorhop", Label: "visitor address hop",
			Desired: func(ctx context.Context) ([]byte, bool, error) {
				ports, err := a.hopPorts(ctx)
				return visitorhop.Render(ports), len(ports) > 0, err
			},
			Apply: func(ctx context.Context) error {
				ports, err := a.hopPorts(ctx)
				if err != nil {
					return err
				}
				return a.Hop.Set(ports)
			},
			Observe: func(context.Context) ([]byte, error) { return visitorhop.Render(a.Hop.Ports()), nil },
		},
		{
			Name: "caddy", Label: "Caddy config",
			Desired: a.Setup.ProxyDesired,
			Apply:   func(ctx context.Context) error { return a.Setup.DeployProxy(ctx, false) },
			// The Caddyfile on disk, as Caddy reads it at its next start or
			// reload: a stray write is mended at the next pass.
			Observe: func(context.Context) ([]byte, error) { return a.Setup.Proxy.Current() },
		},
		{Name: "publish", Label: "publish table", Desired: a.Publish.Desired, Apply: a.Publish.Reconcile},
		{Name: "firewall", Label: "firewall ruleset", Desired: a.Firewall.Desired, Apply: a.Firewall.Reconcile},
	}
}

// hopPorts are the tunnel ports whose requests the visitor hop takes: the
// http tunnels with a PROXY protocol header, from the list the Caddyfile
// is rendered from.
func (a *App) hopPorts(ctx context.Context) (map[int]string, error) {
	ts, err := a.Setup.Tunnels.HTTPTunnels(ctx)
	if err != nil {
		return nil, err
	}
	return webproxy.HopPorts(ts), nil
}

// hostRecorder keeps this edge's part states in the database, for every
// edge's Edges page and metrics.
type hostRecorder struct{ st *store.Store }

func (r hostRecorder) SaveHostPart(ctx context.Context, edge string, s hostsync.State) error {
	return r.st.SaveHostPart(ctx, store.HostPart{Edge: edge, Part: s.Part, Label: s.Label, InUse: s.InUse,
		DesiredHash: s.DesiredHash, AppliedHash: s.AppliedHash, Generation: s.Generation,
		PendingSince: s.PendingSince, Error: s.Error, CheckedAt: s.CheckedAt})
}
