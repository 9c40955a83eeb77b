// Package backoff is the one rule for waiting after failures in a row:
// a first wait, doubled at each failure up to a cap.
package backoff

import "time"

// Doubling is the wait after the n-th failure in a row (n ≥ 1): first,
// doubled n-1 times, at most max.
func Doubling(n int, first, max time.Duration) time.Duration {
	d := first
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}
