package store

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestUpgradeToUDPTunnels: SQLite rebuilds the tunnels table to allow kind
// udp. Every row of it and of the tables that reference it survives, ids
// go on from the highest ever given (not the highest left), and deleting
// a tunnel still deletes what references it.
func TestUpgradeToUDPTunnels(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := sqliteBefore(t, dir, 280)
	for _, q := range []string{
		`INSERT INTO machines(name, username, created_at, secret_hash, secret_sealed, agent_token_hash, tunnel_port, agent_port, agent_local_port)
			VALUES ('nas', 'u', 0, 's', '', 'a', 0, 0, 0)`,
		"INSERT INTO ports VALUES (20001, 1, 'tunnel'), (20002, 1, 'tunnel'), (20003, 1, 'tunnel')",
		"INSERT INTO tunnels(machine_id, name, kind, local_port, subdomain, remote_port, created_at, access, allow_ips, paused) VALUES (1, 'web', 'http', 80, 'web', 20001, 5, 'password', '10.0.0.0/8', 1)",
		"INSERT INTO tunnels(machine_id, name, kind, local_port, public, remote_port, created_at) VALUES (1, 'db', 'tcp', 5432, 1, 20002, 6)",
		"INSERT INTO tunnels(machine_id, name, kind, local_port, remote_port, created_at) VALUES (1, 'gone', 'tcp', 22, 20003, 7)",
		"DELETE FROM tunnels WHERE name = 'gone'",
		"DELETE FROM ports WHERE port = 20003",
		"INSERT INTO tunnel_probes(tunnel_id, state, http_status, checked_at) VALUES (1, 'up', 200, 9)",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := db.Exec("INSERT INTO tunnels(machine_id, name, kind, local_port, remote_port, created_at) VALUES (1, 'dns', 'udp', 53, 20003, 8)"); err == nil {
		t.Fatal("the old schema took a udp tunnel: the test starts from the wrong schema")
	}
	db.Close()

	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	defer s.Close()
	ts, err := s.ListTunnels(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Name != "web" || ts[0].Subdomain != "web" || !ts[0].Paused || ts[1].Name != "db" || !ts[1].Public || ts[1].RemotePort != 20002 {
		t.Fatalf("tunnels after the upgrade: %+v", ts)
	}
	a, err := s.TunnelAccessOf(ctx, 1)
	if err != nil || a.Access != "password" || strings.Join(a.AllowIPs, ",") != "10.0.0.0/8" {
		t.Fatalf("tunnel 1's access after the upgrade: %+v %v", a, err)
	}
	var probes int
	s.DB().QueryRow("SELECT COUNT(*) FROM tunnel_probes WHERE tunnel_id = 1").Scan(&probes)
	if probes != 1 {
		t.Fatalf("%d probes of tunnel 1 after the upgrade, want 1", probes)
	}
	udp, err := s.InsertTunnel(ctx, Tunnel{MachineID: 1, Name: "dns", Kind: "udp", LocalPort: 53}, PortRange{Lo: 20003, Hi: 20003}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if udp.ID != 4 || udp.Kind != "udp" {
		t.Fatalf("new tunnel %+v: want id 4 (3 was given before) and kind udp", udp)
	}
	if err := s.DeleteTunnel(ctx, 1); err != nil {
		t.Fatal(err)
	}
	s.DB().QueryRow("SELECT COUNT(*) FROM tunnel_probes").Scan(&probes)
	if probes != 0 {
		t.Fatal("deleting a tunnel no longer deletes its probe: the references were lost")
	}
	var fk int
	s.DB().QueryRow("PRAGMA foreign_keys").Scan(&fk)
	if fk != 1 {
		t.Fatal("foreign keys left off after the upgrade")
	}
	if _, err := s.DB().Exec("INSERT INTO tunnels(machine_id, name, kind, local_port, remote_port, created_at) VALUES (1, 'x', 'sctp', 1, 20001, 0)"); err == nil {
		t.Fatal("kind sctp was taken")
	}
}

// TestBrokenReferenceStopsTheRebuild: a rebuild that would leave a row
// pointing at nothing is rolled back whole, and says which.
func TestBrokenReferenceStopsTheRebuild(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.migrateForeignKeysOff(ctx, migration{version: 9999, name: "9999_broken.sql", sql: foreignKeysOff +
		"CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER REFERENCES machines(id));\nINSERT INTO child VALUES (1, 42);"})
	if err == nil || !strings.Contains(err.Error(), "9999_broken.sql: would leave 1 broken references (child row 1 → machines)") {
		t.Fatalf("err = %v", err)
	}
	var n int
	if err := s.DB().QueryRow("SELECT COUNT(*) FROM sqlite_master WHERE name = 'child'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the table of a refused migration is there (%d, %v)", n, err)
	}
	if err := s.DB().QueryRow("SELECT COUNT(*) FROM schema_migrations WHERE version = 9999").Scan(&n); err != nil || n != 0 {
		t.Fatalf("a refused migration is recorded (%d, %v)", n, err)
	}
	var fk int
	s.DB().QueryRow("PRAGMA foreign_keys").Scan(&fk)
	if fk != 1 {
		t.Fatal("foreign keys left off after a refused migration")
	}
}

// TestUDPTunnelOnBothEngines: a udp tunnel is stored and read back on
// both engines, and a kind the schema does not know is refused.
func TestUDPTunnelOnBothEngines(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		m, err := s.RegisterMachine(ctx, NewMachine{Name: "nas", Username: "pi", SecretHash: "s", AgentTokenHash: "a",
			Seal: func(int64) (string, error) { return "sealed", nil }, Now: time.Now(), Ports: PortRange{Lo: 30000, Hi: 30009}})
		if err != nil {
			t.Fatal(err)
		}
		r := PortRange{Lo: 30000, Hi: 30009}
		in, err := s.InsertTunnel(ctx, Tunnel{MachineID: m.ID, Name: "dns", Kind: "udp", LocalPort: 53, Public: true}, r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.GetTunnel(ctx, in.ID)
		if err != nil || got.Kind != "udp" || !got.Public || got.RemotePort < 30000 {
			t.Fatalf("udp tunnel read back: %+v %v", got, err)
		}
		if _, err := s.InsertTunnel(ctx, Tunnel{MachineID: m.ID, Name: "x", Kind: "sctp", LocalPort: 1}, r, time.Now()); err == nil {
			t.Fatal("kind sctp was stored")
		}
	})
}
