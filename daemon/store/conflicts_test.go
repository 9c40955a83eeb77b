package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestConflictsByConstraint: a taken machine name (in any ASCII case), a
// taken tunnel name or subdomain come back as the store's own errors on
// both engines, and the transaction that met them leaves nothing behind.
func TestConflictsByConstraint(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		reg := func(name, secret string) (Machine, error) {
			return s.RegisterMachine(ctx, NewMachine{Name: name, Username: "pi", SecretHash: secret, AgentTokenHash: secret + "a",
				Seal: func(int64) (string, error) { return "sealed", nil }, Now: time.Now(), Ports: PortRange{Lo: 30000, Hi: 30009}})
		}
		m, err := reg("nas", "s1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg("NAS", "s2"); !errors.Is(err, ErrNameTaken) {
			t.Fatalf("a taken name: %v, want ErrNameTaken", err)
		}
		if _, err := reg("pi", "s1"); err == nil || errors.Is(err, ErrNameTaken) {
			t.Fatalf("a taken secret: %v, want another error", err)
		}
		if n := count(t, s, "ports"); n != 2 {
			t.Fatalf("%d ports held after two refused registrations, want 2", n)
		}
		r := PortRange{Lo: 30000, Hi: 30009}
		now := time.Now()
		if _, err := s.InsertTunnel(ctx, Tunnel{MachineID: m.ID, Name: "web", Kind: "http", LocalPort: 80, Subdomain: "web"}, r, now); err != nil {
			t.Fatal(err)
		}
		var ce *ConflictError
		_, err = s.InsertTunnel(ctx, Tunnel{MachineID: m.ID, Name: "web", Kind: "http", LocalPort: 80, Subdomain: "other"}, r, now)
		if !errors.As(err, &ce) || ce.Field != "name" {
			t.Fatalf("a taken tunnel name: %v", err)
		}
		_, err = s.InsertTunnel(ctx, Tunnel{MachineID: m.ID, Name: "web2", Kind: "http", LocalPort: 80, Subdomain: "web"}, r, now)
		if !errors.As(err, &ce) || ce.Field != "subdomain" || !errors.Is(err, ErrConflict) {
			t.Fatalf("a taken subdomain: %v", err)
		}
		if _, err := s.InsertTunnel(ctx, Tunnel{MachineID: m.ID + 9, Name: "x", Kind: "tcp", LocalPort: 80}, r, now); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a tunnel of no machine: %v", err)
		}
		if n := count(t, s, "ports"); n != 3 {
			t.Fatalf("%d ports held, want 3", n)
		}
	})
}

// TestPortsAllocatedConcurrently: registrations racing for a small range
// take distinct ports until none is left, then fail with ErrNoFreePort.
func TestPortsAllocatedConcurrently(t *testing.T) {
	eachEngine(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		a, b := db.open(), db.open() // two processes: the writer queue does not order them
		const machines = 8
		var wg sync.WaitGroup
		errs := make(chan error, machines)
		for i := range machines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := a
				if i%2 == 1 {
					s = b
				}
				name := string(rune('a' + i))
				_, err := s.RegisterMachine(ctx, NewMachine{Name: name, Username: "pi", SecretHash: name, AgentTokenHash: name + "a",
					Seal: func(int64) (string, error) { return "sealed", nil }, Now: time.Now(), Ports: PortRange{Lo: 31000, Hi: 31011}})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		ok, full := 0, 0
		for err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrNoFreePort):
				full++
			default:
				t.Errorf("registration: %v", err)
			}
		}
		if ok != 6 || full != 2 {
			t.Fatalf("%d registered, %d out of ports; want 6 and 2", ok, full)
		}
		var distinct int
		if err := a.queryRow(ctx, "SELECT COUNT(DISTINCT port) FROM ports").Scan(&distinct); err != nil || distinct != 12 {
			t.Fatalf("%d distinct ports, %v; want 12", distinct, err)
		}
	})
}
