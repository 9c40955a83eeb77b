package backoff

import (
	"testing"
	"time"
)

func TestDoubling(t *testing.T) {
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second, 6: 30 * time.Second, 60: 30 * time.Second} {
		if got := Doubling(n, time.Second, 30*time.Second); got != want {
			t.Errorf("Doubling(%d) = %v, want %v", n, got, want)
		}
	}
}
