package machines

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
)

// TestDial: the one answer to what a machine's main client dials, which
// every config (delivered, downloaded, bootstrapped, rejoined, a change
// of transport) takes. Alone: the resolver's answer, else the host the
// machine's request came to, else the address it already uses. On one
// edge of several: its home edge, whichever edge asks and whatever the
// request. An answer that is no host is refused in words.
func TestDial(t *testing.T) {
	ctx := context.Background()
	set := reach.Settings{}
	s := &Service{FRPSPort: 7000, EdgeName: "edge-b",
		Reach: &reach.Resolver{Settings: func(context.Context) (reach.Settings, error) { return set, nil }}}
	applied := store.Machine{}
	applied.Config.AppliedServer = "wss://old.example.net"
	for _, c := range []struct {
		name     string
		set      reach.Settings
		m        store.Machine
		fallback string
		want     EdgeTarget
		err      string
	}{
		{"the resolver's answer", reach.Settings{ServerHost: "vps.example.com"}, applied, "203.0.113.5", EdgeTarget{Host: "vps.example.com", Port: 7000}, ""},
		{"the host the request came to", reach.Settings{}, store.Machine{}, "203.0.113.5", EdgeTarget{Host: "203.0.113.5", Port: 7000}, ""},
		{"the address it already uses", reach.Settings{}, applied, "", EdgeTarget{Host: "old.example.net", Port: 7000}, ""},
		{"nothing at all", reach.Settings{}, store.Machine{}, "", EdgeTarget{}, reach.ErrNoAddress.Error()},
	} {
		set = c.set
		got, err := s.Dial(ctx, c.m, c.fallback)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%s: %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %+v %v, want %+v", c.name, got, err, c.want)
		}
	}

	// Several edges: the home edge, whoever asks.
	edges := []EdgeTarget{{ID: 1, Name: "edge-a", Host: "a.example.com", Port: 7000}, {ID: 2, Name: "edge-b", Host: "b.example.com", Port: 7100}}
	s.ClusterEdges = func(context.Context) ([]EdgeTarget, error) { return edges, nil }
	set = reach.Settings{ServerHost: "b.example.com"}
	for _, c := range []struct {
		home string
		want EdgeTarget
	}{
		{"edge-a", EdgeTarget{Host: "a.example.com", Port: 7000}},
		{"edge-b", EdgeTarget{Host: "b.example.com", Port: 7100}},
		{"gone", EdgeTarget{Host: "a.example.com", Port: 7000}}, // the oldest
	} {
		if got, err := s.Dial(ctx, store.Machine{HomeEdge: c.home}, "203.0.113.5"); err != nil || got != c.want {
			t.Errorf("home %s: %+v %v, want %+v", c.home, got, err, c.want)
		}
	}
	edges[0].Host = "bad host!"
	var bad InputError
	if _, err := s.Dial(ctx, store.Machine{HomeEdge: "edge-a"}, ""); !errors.As(err, &bad) {
		t.Errorf("a home edge with no valid address: %v", err)
	}
	edges[0].Host = ""
	if _, err := s.Dial(ctx, store.Machine{HomeEdge: "edge-a"}, ""); !errors.Is(err, reach.ErrNoAddress) {
		t.Errorf("a home edge with no address: %v", err)
	}
}

// TestWireProtocolIsWhatBothSidesSpeak: a client is asked for frp's wire
// protocol v2 only when its frpc and the tunnel server it dials both
// speak it. In a cluster upgraded one edge at a time, an updated machine
// keeps v1 towards the edge not upgraded yet, whose frps would refuse it.
func TestWireProtocolIsWhatBothSidesSpeak(t *testing.T) {
	s := &Service{FRPSPort: 7000}
	ca := &tunnelca.CA{CertPEM: []byte("-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n")}
	for _, c := range []struct {
		client, server string
		v2             bool
	}{
		{"", "0.71.0", false},       // the client's version is not reported yet
		{"0.65.0", "0.71.0", false}, // a machine not updated yet
		{"0.71.0", "", false},       // the edge's tunnel server has not answered yet
		{"0.71.0", "0.65.0", false}, // an edge not upgraded yet
		{"0.71.0", "0.71.0", true},  // both
		{"0.72.1", "0.71.0", true},  // both, one newer
	} {
		m := store.Machine{ID: 1, TunnelPort: 30001, AgentPort: 30002, SSHLocalPort: 22, AgentLocalPort: 7390}
		m.Report.ClientVersion = c.client
		conf, err := s.renderClient(ca, m, "0123456789abcdef0123456789abcdef", EdgeTarget{ID: 2, Name: "edge-b", Host: "b.example.com", Port: 7000, TunnelVersion: c.server}, "edge-b", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(conf, "wireProtocol = 'v2'"); got != c.v2 {
			t.Errorf("frpc %q to frps %q: asks for wire protocol v2: %v, want %v", c.client, c.server, got, c.v2)
		}
	}
}
