package tunnelca_test

import (
	"context"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
)

// Load parses the stored CA once and hands the same one out until the
// stored record changes (another edge, or a restore, replaced it).
func TestLoadParsesOnceUntilTheRecordChanges(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	sealer, err := seal.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := &tunnelca.Authority{Store: st, Sealer: sealer}
	first, err := a.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := a.Load(ctx); err != nil || again != first {
		t.Fatalf("a second Load parsed again (%p, %p) or failed: %v", again, first, err)
	}
	// Another CA's record in its place: the next Load gives that one.
	other := &tunnelca.Authority{Store: openStore(t), Sealer: sealer}
	ca2, err := other.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := other.Store.GetSetting(ctx, "tunnel_ca")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetSetting(ctx, "tunnel_ca", raw); err != nil {
		t.Fatal(err)
	}
	got, err := a.Load(ctx)
	if err != nil || got.Fingerprint() != ca2.Fingerprint() || got.Fingerprint() == first.Fingerprint() {
		t.Fatalf("after the record changed: %v, %v", got, err)
	}
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
