package machines

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// DefaultWSSPort is the web proxy's HTTPS port, where the wss transport
// reaches the tunnel server.
const DefaultWSSPort = 443

// wssPort is where machines on the wss transport dial.
func (s *Service) wssPort() int {
	if s.WSSPort != 0 {
		return s.WSSPort
	}
	return DefaultWSSPort
}

// transportOf is the transport machine m's config is rendered with.
func transportOf(m store.Machine) string {
	if m.Transport == frpconf.TransportWSS {
		return frpconf.TransportWSS
	}
	return frpconf.TransportTCP
}

// serverKey is what a config's digest of "where frpc dials" records
// (ConfigState.AppliedServer): the host, prefixed with wss:// on the wss
// transport, so that a change of either restarts the machine's frpc
// (a reload cannot change them).
func serverKey(host, transport string) string {
	if transport == frpconf.TransportWSS {
		return "wss://" + host
	}
	return host
}

// hostOfServer is the host in a serverKey.
func hostOfServer(key string) string { return strings.TrimPrefix(key, "wss://") }

// TransportView is how a machine reaches the tunnel server, as the API
// shows it.
type TransportView struct {
	// Configured is the transport its config is rendered with: "tcp" or "wss".
	Configured string `json:"configured"`
	// Seen is how it last logged in ("" before its first login) and Addr
	// where from.
	Seen string `json:"seen"`
	Addr string `json:"addr"`
	// Summary says it in words.
	Summary string `json:"summary"`
}

// transportWords names a transport for people.
func transportWords(t string) string {
	if t == frpconf.TransportWSS {
		return "over port 443 (wss, through the web proxy)"
	}
	return "directly (tcp, to the tunnel server's port)"
}

func transportView(m store.Machine) TransportView {
	v := TransportView{Configured: transportOf(m), Seen: m.TransportSeen, Addr: m.TransportAddr}
	switch {
	case v.Seen == "":
		v.Summary = "connects " + transportWords(v.Configured) + "; not connected yet"
	case v.Seen == v.Configured:
		v.Summary = "connected " + transportWords(v.Seen)
		if v.Addr != "" {
			v.Summary += " from " + v.Addr
		}
	default:
		v.Summary = "last connected " + transportWords(v.Seen) + ", but its config now says " + transportWords(v.Configured) +
			": it changes at its next connection"
	}
	return v
}

// TransportRequest is POST /api/machines/transport's input: the machine's
// own choice, authenticated by its agent token.
type TransportRequest struct {
	AgentToken string
	Transport  string
	Client     netip.Addr
	// FallbackHost names the tunnel server when nothing configured does.
	FallbackHost string
}

// TransportChosen is POST /api/machines/transport's answer.
type TransportChosen struct {
	MachineID    int64  `json:"machine_id"`
	Transport    string `json:"transport"`
	ClientConfig string `json:"revtunnel_client_config"`
}

// ChooseTransport is a machine choosing how its tunnel client reaches the
// tunnel server, as bootstrap.sh does when the tunnel server's port is
// closed to it and 443 is open (or the other way round, on a rejoin). It
// records the choice and returns the config to install; its agent is also
// sent that config (a new desired generation) and restarts its frpc.
func (s *Service) ChooseTransport(ctx context.Context, req TransportRequest) (TransportChosen, error) {
	if ok, wait := s.Limiter.Check(req.Client); !ok {
		s.stale(ctx, req.Client, "transport change rate limited")
		return TransportChosen{}, &auth.RateLimitedError{RetryAfter: wait}
	}
	if req.AgentToken == "" {
		s.stale(ctx, req.Client, "transport change without an agent token")
		s.Limiter.Fail(req.Client)
		return TransportChosen{}, ErrInvalidToken
	}
	if req.Transport != frpconf.TransportTCP && req.Transport != frpconf.TransportWSS {
		return TransportChosen{}, InputError(fmt.Sprintf("transport must be %q or %q", frpconf.TransportTCP, frpconf.TransportWSS))
	}
	m, err := s.Store.MachineByAgentTokenHash(ctx, auth.HashToken(req.AgentToken))
	if errors.Is(err, store.ErrNotFound) {
		s.stale(ctx, req.Client, "transport change with an unknown agent token")
		s.Limiter.Fail(req.Client)
		return TransportChosen{}, ErrInvalidToken
	}
	if err != nil {
		return TransportChosen{}, err
	}
	r, err := s.renderer(ctx, m.ID, req.FallbackHost)
	if err != nil {
		return TransportChosen{}, err
	}
	// Where it dials, checked before anything changes.
	if _, err := r.dial(m); err != nil {
		return TransportChosen{}, err
	}
	was := transportOf(m)
	if err := s.Store.SetMachineTransport(ctx, m.ID, req.Transport); err != nil {
		return TransportChosen{}, err
	}
	m.Transport = req.Transport
	cfg, _, err := r.DesiredConfig(ctx, m)
	if err != nil {
		return TransportChosen{}, err
	}
	if err := s.Desire(ctx, m.ID); err != nil {
		return TransportChosen{}, err
	}
	if was != req.Transport {
		s.event(ctx, store.Event{Source: "machine", Kind: "transport_changed", MachineID: m.ID,
			Message: fmt.Sprintf("machine %q now reaches the tunnel server %s (it asked from %s; before: %s)",
				m.Name, transportWords(req.Transport), addrString(req.Client), transportWords(was))})
	}
	return TransportChosen{MachineID: m.ID, Transport: req.Transport, ClientConfig: cfg}, nil
}
