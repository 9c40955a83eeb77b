package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestTunnelDomainsBelongToOneTunnel: a domain is one tunnel's at most, a
// refused change changes nothing, and deleting the tunnel frees its
// domains, on both engines.
func TestTunnelDomainsBelongToOneTunnel(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		r := PortRange{Lo: 30000, Hi: 30099}
		m, err := s.RegisterMachine(ctx, NewMachine{Name: "nas", Username: "pi", SecretHash: "s", AgentTokenHash: "a",
			Seal: func(int64) (string, error) { return "sealed", nil }, Now: time.Now(), Ports: r})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, sub := range []string{"wiki", "blog"} {
			tu, err := s.InsertTunnel(ctx, Tunnel{MachineID: m.ID, Name: sub, Kind: "http", LocalPort: 80, Subdomain: sub}, r, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, tu.ID)
		}
		if err := s.SetTunnelDomains(ctx, ids[0], []string{"wiki.example.org", "docs.example.org"}); err != nil {
			t.Fatal(err)
		}
		var taken *DomainTakenError
		if err := s.SetTunnelDomains(ctx, ids[1], []string{"blog.example.org", "docs.example.org"}); !errors.As(err, &taken) || taken.Domain != "docs.example.org" ||
			taken.TunnelID != ids[0] || !errors.Is(err, ErrConflict) {
			t.Fatalf("another tunnel's domain: %v", err)
		}
		ds, err := s.TunnelDomains(ctx)
		if err != nil || fmt.Sprint(ds) != fmt.Sprintf("map[%d:[docs.example.org wiki.example.org]]", ids[0]) {
			t.Fatalf("domains after a refused change: %v %v", ds, err)
		}
		if owner, err := s.DomainOwner(ctx, "wiki.example.org"); err != nil || owner != ids[0] {
			t.Fatalf("owner: %d %v", owner, err)
		}
		if err := s.DeleteTunnel(ctx, ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DomainOwner(ctx, "wiki.example.org"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a deleted tunnel's domain: %v", err)
		}
		if err := s.SetTunnelDomains(ctx, ids[1], []string{"docs.example.org"}); err != nil {
			t.Fatalf("a freed domain: %v", err)
		}
	})
}

// TestTunnelMadeWholeOrNotAtAll: a tunnel made with its gate, domains and
// targets is one transaction: when its domain is taken, neither the
// tunnel nor its gate is left behind, on both engines.
func TestTunnelMadeWholeOrNotAtAll(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		r := PortRange{Lo: 30100, Hi: 30199}
		m, err := s.RegisterMachine(ctx, NewMachine{Name: "nas", Username: "pi", SecretHash: "s", AgentTokenHash: "a",
			Seal: func(int64) (string, error) { return "sealed", nil }, Now: time.Now(), Ports: r})
		if err != nil {
			t.Fatal(err)
		}
		gate := &TunnelAccess{Access: "operator"}
		taken := []string{"docs.example.org"}
		first, err := s.InsertTunnelParts(ctx, Tunnel{MachineID: m.ID, Name: "docs", Kind: "http", LocalPort: 80, Subdomain: "docs"}, gate, &taken, nil, r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		before, _ := s.ListTunnels(ctx, 0)
		var dt *DomainTakenError
		_, err = s.InsertTunnelParts(ctx, Tunnel{MachineID: m.ID, Name: "copy", Kind: "http", LocalPort: 81, Subdomain: "copy"}, gate, &taken, nil, r, time.Now())
		if !errors.As(err, &dt) || dt.TunnelID != first.ID {
			t.Fatalf("a tunnel with a taken domain: %v", err)
		}
		after, _ := s.ListTunnels(ctx, 0)
		if len(after) != len(before) {
			t.Fatalf("a refused tunnel was left behind: %d tunnels, was %d", len(after), len(before))
		}
		as, err := s.TunnelAccessOf(ctx, first.ID)
		if err != nil || as.Access != "operator" {
			t.Fatalf("the first tunnel's gate: %+v %v", as, err)
		}
		// A change is whole too: a second tunnel given the first's domain
		// and a password gate keeps its old gate when the domain is refused.
		second, err := s.InsertTunnelParts(ctx, Tunnel{MachineID: m.ID, Name: "wiki", Kind: "http", LocalPort: 82, Subdomain: "wiki"}, gate, nil, nil, r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		pw := &TunnelAccess{TunnelID: second.ID, Access: "password", PasswordHash: "$argon2id$pw"}
		if err := s.UpdateTunnelParts(ctx, second, pw, nil, &taken, r); !errors.As(err, &dt) {
			t.Fatalf("a change to a taken domain: %v", err)
		}
		if as, err := s.TunnelAccessOf(ctx, second.ID); err != nil || as.Access != "operator" {
			t.Fatalf("a refused change left its gate: %+v %v", as, err)
		}
		if err := s.UpdateTunnelParts(ctx, second, pw, nil, nil, r); err != nil {
			t.Fatal(err)
		}
		if as, err := s.TunnelAccessOf(ctx, second.ID); err != nil || as.Access != "password" {
			t.Fatalf("the gate after the change: %+v %v", as, err)
		}
	})
}
