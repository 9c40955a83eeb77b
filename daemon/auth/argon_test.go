package auth

import (
	"context"
	"sync/atomic"
	"testing"
)

// smallHash runs a cheap argon2id through g.
func smallHash(t *testing.T, g *Gate) {
	t.Helper()
	if _, err := g.IDKey(context.Background(), Ticket{}, []byte("pw"), []byte("saltsaltsaltsalt"), 1, 64, 1, 32); err != nil {
		t.Fatal(err)
	}
}

// The hash's memory is back with the system when IDKey returns, so the
// answer to a login comes with the daemon's memory already returned.
func TestGateReturnsMemoryBeforeAnswering(t *testing.T) {
	g := NewGate(2, 1, 8)
	var calls atomic.Int32
	g.freeOS = func() { calls.Add(1) }
	smallHash(t, g)
	if n := calls.Load(); n != 1 {
		t.Fatalf("memory returned %d times when IDKey returned, want 1", n)
	}
}

// A run that ends while another run's memory is being returned gets its
// memory returned too: the first release ran while it was still in use.
func TestGateReturnsMemoryOfARunEndingDuringARelease(t *testing.T) {
	g := NewGate(2, 0, 8)
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	g.freeOS = func() {
		if calls.Add(1) == 1 {
			close(started)
			<-release
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		smallHash(t, g)
	}()
	<-started // the first run is returning its memory
	smallHash(t, g)
	close(release)
	<-done
	if n := calls.Load(); n != 2 {
		t.Fatalf("memory returned %d times for two runs, the second ending during the first's release; want 2", n)
	}
}
