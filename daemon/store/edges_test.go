package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// Edges register by heartbeat, in join order; a machine is online while
// one edge that is up has it, and offline once that edge is down.
func TestEdgesAndMachineStatus(t *testing.T) {
	eachEngine(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		a, b := db.open(), db.open() // two edges' daemons
		now := time.Now().UTC().Truncate(time.Millisecond)
		ea, err := a.EdgeHeartbeat(ctx, "edge-a", "203.0.113.1", "1.0", 7000, now)
		if err != nil {
			t.Fatal(err)
		}
		eb, err := b.EdgeHeartbeat(ctx, "edge-b", "203.0.113.2", "1.0", 7000, now)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := a.EdgeHeartbeat(ctx, "edge-a", "203.0.113.9", "1.1", 7000, now.Add(time.Second)); err != nil || again.ID != ea.ID || again.Address != "203.0.113.9" {
			t.Fatalf("heartbeat again: %+v, %v", again, err)
		}
		list, err := b.ListEdges(ctx)
		if err != nil || len(list) != 2 || list[0].Name != "edge-a" || list[1].Name != "edge-b" || list[0].Version != "1.1" || list[0].TunnelVersion != "" {
			t.Fatalf("edges: %+v, %v", list, err)
		}
		// The tunnel server's version, as edge A saw it answer: the other
		// edge reads it, and a heartbeat keeps it.
		if err := a.SetEdgeTunnelVersion(ctx, "edge-a", "0.71.0"); err != nil {
			t.Fatal(err)
		}
		if again, err := a.EdgeHeartbeat(ctx, "edge-a", "203.0.113.9", "1.1", 7000, now.Add(2*time.Second)); err != nil || again.TunnelVersion != "0.71.0" {
			t.Fatalf("heartbeat after the tunnel server's version: %+v, %v", again, err)
		}
		if got, err := b.GetEdge(ctx, ea.ID); err != nil || got.TunnelVersion != "0.71.0" {
			t.Fatalf("edge A as B reads it: %+v, %v", got, err)
		}
		m, err := a.RegisterMachine(ctx, NewMachine{Name: "nas", Username: "pi", SecretHash: "s", AgentTokenHash: "a",
			Seal: func(int64) (string, error) { return "sealed", nil }, Now: now, Ports: PortRange{Lo: 30000, Hi: 30100}})
		if err != nil {
			t.Fatal(err)
		}
		status := func(want string) {
			t.Helper()
			got, err := b.GetMachine(ctx, m.ID)
			if err != nil || got.Status != want {
				t.Fatalf("machine status %q (%v), want %q", got.Status, err, want)
			}
		}
		status("pending")
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(a.SetMachineEdgeStatus(ctx, m.ID, ea.ID, "online", now))
		must(b.SetMachineEdgeStatus(ctx, m.ID, eb.ID, "online", now))
		status("online")
		// Edge A's SSH proxy closes: still online through B.
		must(a.SetMachineEdgeStatus(ctx, m.ID, ea.ID, "offline", now))
		status("online")
		// B stops beating; at 31 s a settle pass finds no edge that is up.
		later := now.Add(EdgeDeadAfter + time.Second)
		must(a.SetMachineEdgeStatus(ctx, m.ID, ea.ID, "offline", later))
		status("offline")
		// B's SSH proxy closed too; A beats and the machine is back through A.
		must(b.SetMachineEdgeStatus(ctx, m.ID, eb.ID, "offline", later))
		if _, err := a.EdgeHeartbeat(ctx, "edge-a", "203.0.113.9", "1.1", 7000, later); err != nil {
			t.Fatal(err)
		}
		must(a.SetMachineEdgeStatus(ctx, m.ID, ea.ID, "online", later))
		status("online")
		// A goes down: the settle pass on B says so.
		if _, err := b.EdgeHeartbeat(ctx, "edge-b", "203.0.113.2", "1.0", 7000, later.Add(EdgeDeadAfter)); err != nil {
			t.Fatal(err)
		}
		n, err := b.SettleMachines(ctx, later.Add(EdgeDeadAfter+time.Second))
		if err != nil || n != 1 {
			t.Fatalf("settle: %d, %v", n, err)
		}
		status("offline")
		conns, err := b.MachineEdges(ctx)
		if err != nil || len(conns[m.ID]) != 2 || conns[m.ID][0].EdgeID != ea.ID {
			t.Fatalf("machine edges: %+v, %v", conns, err)
		}
		// Retired, then forgotten: its connections go with it.
		must(b.RetireEdge(ctx, ea.ID, later))
		if e, _ := b.GetEdge(ctx, ea.ID); e.RetiringAt == nil {
			t.Fatalf("not retiring: %+v", e)
		}
		must(b.ForgetEdge(ctx, ea.ID))
		if _, err := b.GetEdge(ctx, ea.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("forgotten edge: %v", err)
		}
		if conns, _ := b.MachineEdges(ctx); len(conns[m.ID]) != 1 {
			t.Fatalf("connections after forgetting A: %+v", conns)
		}
		// A's daemon still runs: its heartbeat does not add it back.
		if _, err := a.EdgeHeartbeatAs(ctx, ea.ID, "edge-a", "203.0.113.9", "1.1", 7000, later); !errors.Is(err, ErrEdgeForgotten) {
			t.Fatalf("a forgotten edge's heartbeat: %v", err)
		}
		if list, _ := b.ListEdges(ctx); len(list) != 1 || list[0].Name != "edge-b" {
			t.Fatalf("edges after the forgotten edge's heartbeat: %+v", list)
		}
	})
}

// An edge join token is claimed once, by one edge; the same edge may run
// its join again; an expired one is refused.
func TestEdgeTokens(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.Now()
		if _, err := s.InsertEdgeToken(ctx, "h1", now, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.InsertEdgeToken(ctx, "h2", now.Add(-2*time.Hour), now.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			hash, name string
			want       error
		}{
			{"h1", "edge-b", nil}, {"h1", "edge-b", nil}, {"h1", "edge-c", ErrTokenInvalid},
			{"h2", "edge-c", ErrTokenInvalid}, {"nope", "edge-c", ErrTokenInvalid},
		} {
			if err := s.ClaimEdgeToken(ctx, c.hash, c.name, now); !errors.Is(err, c.want) {
				t.Fatalf("claim %s for %s: %v, want %v", c.hash, c.name, err, c.want)
			}
		}
	})
}

// Of edges racing for a lease exactly one holds it; it renews it, and
// another takes it only once it has expired.
func TestLeases(t *testing.T) {
	eachEngine(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		now := time.Now()
		stores := []*Store{db.open(), db.open(), db.open()}
		var mu sync.Mutex
		var holders []string
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := []string{"a", "b", "c"}[i]
				fence, err := s.LeaseFence(ctx, "notify", name, time.Minute, now)
				ok := fence > 0
				if err != nil {
					t.Error(err)
				}
				if ok {
					mu.Lock()
					holders = append(holders, name)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(holders) != 1 {
			t.Fatalf("holders: %v", holders)
		}
		h := holders[0]
		other := map[string]string{"a": "b", "b": "c", "c": "a"}[h]
		if fence, err := stores[0].LeaseFence(ctx, "notify", h, time.Minute, now.Add(30*time.Second)); err != nil || fence == 0 {
			t.Fatalf("renew by %s: fence %d, %v", h, fence, err)
		}
		if fence, _ := stores[1].LeaseFence(ctx, "notify", other, time.Minute, now.Add(80*time.Second)); fence != 0 {
			t.Fatal("taken before it expired")
		}
		if fence, err := stores[1].LeaseFence(ctx, "notify", other, time.Minute, now.Add(91*time.Second)); err != nil || fence == 0 {
			t.Fatalf("take after expiry: fence %d, %v", fence, err)
		}
	})
}

// A lease's fence stays while its holder renews it and grows by one when
// it changes hands; an edge that does not hold it gets 0.
func TestLeaseFence(t *testing.T) {
	eachEngine(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open()
		now := time.Now()
		for _, c := range []struct {
			holder string
			at     time.Duration
			want   int64
		}{
			{"a", 0, 1}, {"a", 30 * time.Second, 1}, {"b", 40 * time.Second, 0},
			{"b", 91 * time.Second, 2}, {"b", 100 * time.Second, 2}, {"a", 3 * time.Minute, 3},
		} {
			if got, err := s.LeaseFence(ctx, "rollouts", c.holder, time.Minute, now.Add(c.at)); err != nil || got != c.want {
				t.Fatalf("%s at +%s: fence %d %v, want %d", c.holder, c.at, got, err, c.want)
			}
		}
	})
}

// A gate session written by one edge is read by another; a code is taken
// once; a tunnel's tokens end together.
func TestGateTokensAcrossEdges(t *testing.T) {
	eachEngine(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		a, b := db.open(), db.open()
		now := time.Now()
		if err := a.PutGateToken(ctx, "s1", GateSession, 7, now.Add(time.Hour), GateWho{User: "ana", Email: "ana@example.com"}); err != nil {
			t.Fatal(err)
		}
		if err := a.PutGateToken(ctx, "c1", GateCode, 7, now.Add(time.Minute), GateWho{User: "bo"}); err != nil {
			t.Fatal(err)
		}
		if id, _, who, err := b.GateToken(ctx, "s1", GateSession, now); err != nil || id != 7 || who != (GateWho{User: "ana", Email: "ana@example.com"}) {
			t.Fatalf("session on b: %d %v %v", id, who, err)
		}
		if _, _, _, err := b.GateToken(ctx, "s1", GateSession, now.Add(2*time.Hour)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("expired session: %v", err)
		}
		if _, _, _, err := b.GateToken(ctx, "c1", GateSession, now); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a code is not a session: %v", err)
		}
		if id, who, err := b.TakeGateToken(ctx, "c1", GateCode, now); err != nil || id != 7 || who.User != "bo" {
			t.Fatalf("take code: %d %v %v", id, who, err)
		}
		if _, _, err := a.TakeGateToken(ctx, "c1", GateCode, now); !errors.Is(err, ErrNotFound) {
			t.Fatalf("code taken twice: %v", err)
		}
		if err := b.DeleteGateTokensOf(ctx, 7); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := a.GateToken(ctx, "s1", GateSession, now); !errors.Is(err, ErrNotFound) {
			t.Fatalf("session after its tunnel's tokens ended: %v", err)
		}
	})
}

// Failures one edge records are read by the others, not by itself.
func TestAuthFailuresAcrossEdges(t *testing.T) {
	eachEngine(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		a, b := db.open(), db.open()
		now := time.Now().Truncate(time.Millisecond)
		for i := range 3 {
			if _, err := a.InsertAuthFailure(ctx, "edge-a", "192.0.2.7/32", now.Add(time.Duration(i)*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.InsertAuthFailure(ctx, "edge-b", "192.0.2.8/32", now); err != nil {
			t.Fatal(err)
		}
		forKey, all, err := b.OtherAuthFailures(ctx, "edge-b", "192.0.2.7/32", now.Add(-time.Minute), 10, now.Add(time.Second), 60)
		if err != nil || len(forKey) != 3 || !forKey[0].Equal(now) || len(all) != 2 {
			t.Fatalf("b's view of the others: %v %v %v", forKey, all, err)
		}
		got, err := b.AuthFailuresAfter(ctx, "edge-b", 0, now.Add(-time.Minute), 100)
		if err != nil || len(got) != 3 || got[0].Key != "192.0.2.7/32" || got[2].At.Sub(got[0].At) != 2*time.Second {
			t.Fatalf("b reads: %+v, %v", got, err)
		}
		if more, _ := b.AuthFailuresAfter(ctx, "edge-b", got[2].ID, now.Add(-time.Minute), 100); len(more) != 0 {
			t.Fatalf("after the last: %+v", more)
		}
		if err := a.PruneAuthFailures(ctx, now.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if left, _ := a.AuthFailuresAfter(ctx, "edge-x", 0, time.Time{}, 100); len(left) != 2 {
			t.Fatalf("after pruning: %+v", left)
		}
	})
}

// TestEdgeListsFollowWrites: the edge list and the machines' connections
// are read from memory between writes, and a write by another daemon,
// even a plain heartbeat or ping that announces nothing, shows in them.
func TestEdgeListsFollowWrites(t *testing.T) {
	eachEngine(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		a, b := db.open(), db.open()
		now := time.Now().UTC().Truncate(time.Millisecond)
		e, err := a.EdgeHeartbeat(ctx, "edge-a", "203.0.113.1", "1.0", 7000, now)
		if err != nil {
			t.Fatal(err)
		}
		m, err := a.RegisterMachine(ctx, NewMachine{Name: "nas", Username: "pi", SecretHash: "s", AgentTokenHash: "a",
			Seal: func(int64) (string, error) { return "sealed", nil }, Now: now, Ports: PortRange{Lo: 30000, Hi: 30100}})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.SetMachineEdgeStatus(ctx, m.ID, e.ID, "online", now); err != nil {
			t.Fatal(err)
		}
		seenBy := func(want time.Time) func() error {
			return func() error {
				list, err := b.ListEdges(ctx)
				if err != nil || len(list) != 1 || !list[0].LastSeen.Equal(want) {
					return fmt.Errorf("edges %+v, %v; want last_seen %v", list, err, want)
				}
				conns, err := b.MachineEdges(ctx)
				if err != nil || len(conns[m.ID]) != 1 || !conns[m.ID][0].LastSeen.Equal(want) {
					return fmt.Errorf("connections %+v, %v; want last_seen %v", conns, err, want)
				}
				return nil
			}
		}
		testutil.Eventually(t, 5*time.Second, "b reads what a wrote", seenBy(now))
		// What a caller does with its copy stays its own.
		list, _ := b.ListEdges(ctx)
		list[0].Name = "changed"
		conns, _ := b.MachineEdges(ctx)
		conns[m.ID][0].Status = "changed"
		if again, _ := b.ListEdges(ctx); again[0].Name != "edge-a" {
			t.Fatalf("a caller's change reached the cached edge list: %+v", again)
		}
		if again, _ := b.MachineEdges(ctx); again[m.ID][0].Status != "online" {
			t.Fatalf("a caller's change reached the cached connections: %+v", again)
		}
		later := now.Add(5 * time.Second)
		if _, err := a.EdgeHeartbeat(ctx, "edge-a", "203.0.113.1", "1.0", 7000, later); err != nil {
			t.Fatal(err)
		}
		if err := a.TouchMachines(ctx, map[int64]time.Time{m.ID: later}, e.ID); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 5*time.Second, "b reads the heartbeat and the ping", seenBy(later))
	})
}

// What a tunnel server reports is written only while nothing newer says
// otherwise (a status or a Ping recorded since it was asked), never turns
// a machine that never connected offline, and on an edge records a
// machine it has never had.
func TestSettleMachineStatus(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.Now().Truncate(time.Millisecond)
		m, err := s.RegisterMachine(ctx, NewMachine{Name: "nas", Username: "pi", SecretHash: "s", AgentTokenHash: "a",
			Seal: func(int64) (string, error) { return "sealed", nil }, Now: now, Ports: PortRange{Lo: 30000, Hi: 30100}})
		if err != nil {
			t.Fatal(err)
		}
		status := func() string {
			t.Helper()
			got, err := s.GetMachine(ctx, m.ID)
			if err != nil {
				t.Fatal(err)
			}
			return got.Status
		}
		settle := func(status string, quiet time.Time) bool {
			t.Helper()
			changed, err := s.SettleMachineStatus(ctx, m.ID, status, now, quiet)
			if err != nil {
				t.Fatal(err)
			}
			return changed
		}
		if settle("offline", now.Add(time.Hour)) || status() != "pending" {
			t.Fatalf("a machine that never connected went %s", status())
		}
		// Recorded online at now: a report asked for before that is old news.
		if err := s.SetMachineStatus(ctx, m.ID, "online", now); err != nil {
			t.Fatal(err)
		}
		if settle("offline", now.Add(-time.Second)) || status() != "online" {
			t.Fatalf("a report older than the status overwrote it: %s", status())
		}
		if !settle("offline", now.Add(time.Second)) || status() != "offline" {
			t.Fatalf("a report newer than the status: %s", status())
		}
		// On an edge: the edge's row, and the machine's status from it.
		e, err := s.EdgeHeartbeat(ctx, "edge-a", "203.0.113.9", "1.1", 7000, now)
		if err != nil {
			t.Fatal(err)
		}
		changed, err := s.SettleMachineEdgeStatus(ctx, m.ID, e.ID, "online", now.Add(2*time.Second), now.Add(time.Second))
		if err != nil || !changed || status() != "online" {
			t.Fatalf("connected on an edge that never had it: changed %v (%v), status %s", changed, err, status())
		}
		if err := s.SetMachineEdgeStatus(ctx, m.ID, e.ID, "online", now.Add(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if changed, err := s.SettleMachineEdgeStatus(ctx, m.ID, e.ID, "offline", now.Add(6*time.Second), now.Add(4*time.Second)); err != nil || changed || status() != "online" {
			t.Fatalf("a report older than the edge's status overwrote it: changed %v (%v), status %s", changed, err, status())
		}
		if changed, err := s.SettleMachineEdgeStatus(ctx, m.ID, e.ID, "offline", now.Add(7*time.Second), now.Add(6*time.Second)); err != nil || !changed || status() != "offline" {
			t.Fatalf("gone from the edge: changed %v (%v), status %s", changed, err, status())
		}
	})
}
