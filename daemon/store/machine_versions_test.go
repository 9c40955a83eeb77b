package store

import (
	"context"
	"reflect"
	"testing"
	"time"
)

// TestMachineVersionsUpgrade: a machine stored before migration 0253 reads
// as never reported and never updated; reports and update states are
// stored and read back, and clearing a state keeps the report.
func TestMachineVersionsUpgrade(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := sqliteBefore(t, dir, 253)
	if _, err := db.Exec(`INSERT INTO machines(name, username, created_at, secret_hash, secret_sealed, agent_token_hash, tunnel_port, agent_port, agent_local_port)
		VALUES ('nas', 'u', 0, 's', '', 'a', 20001, 20002, 7000)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := openAt(t, dir)
	m, err := s.GetMachine(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Report.At.IsZero() || m.Report.AgentVersion != "" || len(m.Report.Capabilities) != 0 || m.Update != (UpdateState{}) {
		t.Fatalf("an old machine: report %+v, update %+v; want none", m.Report, m.Update)
	}

	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rep := AgentReport{AgentVersion: "1.2.0", ClientVersion: "0.61.1", BundleVersion: "1.2.0", Arch: "arm64",
		Capabilities: []string{"update"}, At: at}
	if err := s.SetAgentReport(ctx, 1, rep); err != nil {
		t.Fatal(err)
	}
	up := UpdateState{State: "failed", Target: "1.3.0", Error: "bundle refused: SHA-256 mismatch", At: at.Add(time.Minute)}
	if err := s.SetUpdateState(ctx, 1, up); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListMachines(ctx)
	if err != nil || len(list) != 1 {
		t.Fatal(list, err)
	}
	if !reflect.DeepEqual(list[0].Report, rep) || list[0].Update != up || !list[0].Report.Can("update") || list[0].Report.Can("other") {
		t.Fatalf("read back: report %+v, update %+v", list[0].Report, list[0].Update)
	}
	if err := s.SetUpdateState(ctx, 1, UpdateState{}); err != nil {
		t.Fatal(err)
	}
	m, _ = s.GetMachine(ctx, 1)
	if m.Update != (UpdateState{}) || m.Report.AgentVersion != "1.2.0" {
		t.Fatalf("after clearing the update: %+v %+v", m.Update, m.Report)
	}
	if err := s.SetAgentReport(ctx, 9, rep); err != ErrNotFound {
		t.Errorf("unknown machine: %v", err)
	}
	if err := s.SetUpdateState(ctx, 9, up); err != ErrNotFound {
		t.Errorf("unknown machine: %v", err)
	}
}
