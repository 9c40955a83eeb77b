package store

import (
	"context"
	"errors"
	"testing"
)

// TestUpgradeWithDuplicateMachineNames: a database from before names were
// unique, holding the same name three times, upgrades; the oldest keeps its
// name, the others get their id appended, and from then on names are
// unique regardless of ASCII case.
func TestUpgradeWithDuplicateMachineNames(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := sqliteBefore(t, dir, 70)
	for i, name := range []string{"pi", "PI", "nas", "pi"} {
		if _, err := db.Exec(`INSERT INTO machines(name, username, created_at, secret_hash, secret_sealed, agent_token_hash, tunnel_port, agent_port, agent_local_port)
			VALUES (?, 'u', 0, ?, '', ?, 0, 0, 0)`, name, "s"+name+string(rune('0'+i)), "a"+name+string(rune('0'+i))); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	defer s.Close()
	got, err := s.ListMachines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range got {
		names = append(names, m.Name)
	}
	if want := []string{"pi", "PI (2)", "nas", "pi (4)"}; len(names) != 4 || names[0] != want[0] || names[1] != want[1] || names[2] != want[2] || names[3] != want[3] {
		t.Fatalf("names after upgrade = %q, want %q", names, want)
	}
	if err := s.RenameMachine(ctx, 3, "Pi"); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("rename to a taken name: %v", err)
	}
	if got[0].SSHKeyID != "" || got[0].ConfigPush != nil {
		t.Fatalf("new columns of an old machine = %+v", got[0])
	}
}
