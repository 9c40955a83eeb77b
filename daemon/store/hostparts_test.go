package store

import (
	"context"
	"testing"
	"time"
)

// TestHostParts: each edge's state of each part of its host is kept under
// (edge, part), the latest replacing the one before, on both engines; a
// pending part says since when and why, and drifts until it is applied.
func TestHostParts(t *testing.T) {
	eachEngine(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open()
		since := time.Date(2026, 12, 5, 12, 3, 0, 0, time.UTC)
		pending := HostPart{Edge: "edge-b", Part: "caddy", Label: "Caddy config", InUse: true, DesiredHash: "bbb", AppliedHash: "aaa",
			Generation: 3, PendingSince: &since, Error: "Error: unrecognized directive: bogus", CheckedAt: since.Add(time.Minute)}
		for _, p := range []HostPart{
			{Edge: "edge-b", Part: "caddy", Label: "Caddy config", InUse: true, DesiredHash: "aaa", AppliedHash: "aaa", Generation: 3, CheckedAt: since},
			pending,
			{Edge: "edge-a", Part: "publish", Label: "publish table", CheckedAt: since},
		} {
			if err := s.SaveHostPart(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.HostParts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Edge != "edge-a" || got[0].Drifted() || got[1].Error != pending.Error ||
			!got[1].PendingSince.Equal(since) || got[1].Generation != 3 || !got[1].Drifted() || !got[1].CheckedAt.Equal(pending.CheckedAt) {
			t.Fatalf("host parts: %+v", got)
		}
	})
}
