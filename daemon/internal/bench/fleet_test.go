package bench

import (
	"strings"
	"testing"
	"time"
)

// Fleets of one size taken together: each figure the median of theirs,
// the single changes of all; the growth table a column a size.
func TestMedianFleetAndGrowth(t *testing.T) {
	f := func(n int, join time.Duration, rss int64, refused int, changes ...time.Duration) fleetFigures {
		return fleetFigures{N: n, Join: join, DaemonRSS: rss, FRPSRSS: rss, RateRefused: refused, Change: changes,
			DomainAll: join, DomainCurve: []string{join.String()}, Page: time.Millisecond}
	}
	small := medianFleet([]fleetFigures{
		f(100, 3*time.Second, 10<<20, 0, 100*time.Millisecond),
		f(100, time.Second, 30<<20, 2, 300*time.Millisecond),
		f(100, 2*time.Second, 20<<20, 0, 200*time.Millisecond),
	})
	if small.Join != 2*time.Second || small.DaemonRSS != 20<<20 || small.RateRefused != 2 || len(small.Change) != 3 ||
		small.Change[0] != 100*time.Millisecond || small.DomainCurve[0] != "2s" || small.Runs != 3 {
		t.Fatalf("median of three fleets: %+v", small)
	}
	big := medianFleet([]fleetFigures{f(300, 9*time.Second, 60<<20, 0, time.Second), f(300, 9*time.Second, 60<<20, 0, time.Second), f(300, 9*time.Second, 60<<20, 0, time.Second)})
	table := growthTable([]fleetFigures{small, big}, false)
	for _, want := range []string{
		"each number the median of 3 fleets",
		"| figure | 100 machines | 300 machines | grew |",
		"| all joined (POST /api/bootstrap) | 2s | 9s | ×4.5 |",
		"| edge memory: daemon + frps | 42 MB | 126 MB | ×3.0 |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("growth table without %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "PostgreSQL") || !strings.Contains(growthTable([]fleetFigures{small, big}, true), "| PostgreSQL server's CPU at steady state (% of one) |") {
		t.Errorf("the PostgreSQL server's CPU is a line of the PostgreSQL fleet's table only:\n%s", table)
	}
	if !strings.Contains(small.String(), "**100 machines** (median of 3 fleets)") {
		t.Errorf("one size's figures: %s", small.String())
	}
}
