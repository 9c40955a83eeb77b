package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestTargetsFollowTheirTunnelAndMachines: a tunnel's other targets each
// hold a port of their machine's; changing the list keeps what stays,
// frees what goes, and refuses a machine that does not exist whole; a
// paused tunnel's targets are paused; deleting a target's machine, the
// tunnel or the tunnel's machine frees every port they held, on both
// engines.
func TestTargetsFollowTheirTunnelAndMachines(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		r := PortRange{Lo: 30000, Hi: 30099}
		var ms []Machine
		for i := range 3 {
			m, err := s.RegisterMachine(ctx, NewMachine{Name: fmt.Sprintf("m%d", i+1), Username: "pi", SecretHash: fmt.Sprintf("s%d", i), AgentTokenHash: fmt.Sprintf("a%d", i),
				Seal: func(int64) (string, error) { return "sealed", nil }, Now: time.Now(), Ports: r})
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
		base := count(t, s, "ports") // two per machine
		web, err := s.InsertTunnel(ctx, Tunnel{MachineID: ms[0].ID, Name: "web", Kind: "http", LocalPort: 80, Subdomain: "web",
			Balance: "round_robin", Health: Health{Path: "/healthz", IntervalS: 5, ExpectStatus: 204}}, r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetTunnel(ctx, web.ID); got.Balance != "round_robin" || got.Health != (Health{"/healthz", 5, 204}) {
			t.Fatalf("tunnel read back: %+v", got)
		}
		plain, err := s.InsertTunnel(ctx, Tunnel{MachineID: ms[0].ID, Name: "plain", Kind: "http", LocalPort: 81, Subdomain: "plain"}, r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.ListCheckedTunnels(ctx); err != nil || len(got) != 1 || got[0].ID != web.ID {
			t.Fatalf("checked tunnels: %+v %v", got, err)
		}
		if err := s.DeleteTunnel(ctx, plain.ID); err != nil {
			t.Fatal(err)
		}
		ts, err := s.SetTargets(ctx, web.ID, []TargetSpec{{ms[1].ID, 8080}, {ms[2].ID, 8081}}, r)
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != 2 || ts[0].MachineID != ms[1].ID || ts[0].Position != 1 || ts[1].MachineID != ms[2].ID || ts[1].Position != 2 ||
			ts[0].RemotePort == ts[1].RemotePort || ts[0].Status != "pending" || count(t, s, "ports") != base+3 {
			t.Fatalf("targets %+v, %d ports", ts, count(t, s, "ports"))
		}
		var holder int64
		s.queryRow(ctx, "SELECT machine_id FROM ports WHERE port = ?", ts[1].RemotePort).Scan(&holder)
		if holder != ms[2].ID {
			t.Fatalf("target port held by machine %d, want %d", holder, ms[2].ID)
		}
		kept := ts[1].RemotePort
		if _, err := s.SetTargets(ctx, web.ID, []TargetSpec{{ms[1].ID, 8080}, {999, 1}}, r); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a target on no machine: %v", err)
		}
		if got, _ := s.TargetsOf(ctx, web.ID); len(got) != 2 {
			t.Fatalf("a refused change changed the targets: %+v", got)
		}
		ts, err = s.SetTargets(ctx, web.ID, []TargetSpec{{ms[2].ID, 8081}}, r)
		if err != nil || len(ts) != 1 || ts[0].RemotePort != kept || ts[0].Position != 1 || count(t, s, "ports") != base+2 {
			t.Fatalf("after removing one: %+v %v, %d ports", ts, err, count(t, s, "ports"))
		}
		if got, _ := s.ListTargets(ctx, ms[2].ID); len(got) != 1 || got[0].TunnelID != web.ID {
			t.Fatalf("machine 3's targets: %+v", got)
		}
		web.Paused = true
		if err := s.UpdateTunnelParts(ctx, web, nil, nil, nil, r); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetTarget(ctx, ts[0].ID); !got.Paused {
			t.Fatal("a paused tunnel's target is not paused")
		}
		if got, _ := s.ListCheckedTunnels(ctx); len(got) != 0 {
			t.Fatalf("a paused tunnel is checked: %+v", got)
		}
		if err := s.SetTargetStatus(ctx, ts[0].ID, "online"); err != nil {
			t.Fatal(err)
		}
		// The target's machine goes: so do its target and its port.
		if err := s.DeleteMachine(ctx, ms[2].ID); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.TargetsOf(ctx, web.ID); len(got) != 0 || count(t, s, "ports") != base-2+1 {
			t.Fatalf("after deleting machine 3: %+v, %d ports", got, count(t, s, "ports"))
		}
		// The tunnel goes: so do its targets' ports.
		if _, err := s.SetTargets(ctx, web.ID, []TargetSpec{{ms[1].ID, 8080}}, r); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteTunnel(ctx, web.ID); err != nil {
			t.Fatal(err)
		}
		if n := count(t, s, "ports"); n != base-2 || count(t, s, "tunnel_targets") != 0 {
			t.Fatalf("after deleting the tunnel: %d ports, want %d", n, base-2)
		}
		// The tunnel's machine goes: so do its tunnels' targets elsewhere.
		web2, err := s.InsertTunnel(ctx, Tunnel{MachineID: ms[0].ID, Name: "web2", Kind: "http", LocalPort: 80, Subdomain: "web2"}, r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetTargets(ctx, web2.ID, []TargetSpec{{ms[1].ID, 8080}}, r); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteMachine(ctx, ms[0].ID); err != nil {
			t.Fatal(err)
		}
		if n := count(t, s, "ports"); n != 2 || count(t, s, "tunnel_targets") != 0 {
			t.Fatalf("after deleting the tunnel's machine: %d ports (machine 2's two), %d targets", n, count(t, s, "tunnel_targets"))
		}
	})
}
