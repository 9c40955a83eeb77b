package systemtest

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// startOrder is the order the system tests start in, as many at a time as
// -parallel says (two on two processors). Each spends much of its time
// waiting (hosts booting, a rollback timer, a database stopped for a
// minute), and Go starts parallel tests in no set order: when the test
// with the longest wait happened to start last, the machine idled through
// that wait at the end of `make test`. Longest first, and the short ones
// last, so the waits pass beside other work. Tests not named here start
// after these, by name.
var startOrder = []string{
	"TestTwoEdges", "TestFleetUpdate", "TestPackage", "TestDocumentedPath",
	"TestMachineJoin", "TestJobsWhileTheDashboardPolls", "TestSystemd",
}

var sched = struct {
	mu      sync.Mutex
	cond    *sync.Cond
	slots   int
	running int
	waiting map[string]bool
}{waiting: map[string]bool{}}

// initOrder takes -parallel as the number of system tests at once, and
// lets every test reach parallel's queue (Go's own limit would hold all
// but that many before it, in no set order).
func initOrder() error {
	flag.Parse()
	n, err := strconv.Atoi(flag.Lookup("test.parallel").Value.String())
	if err != nil || n < 1 {
		return fmt.Errorf("-parallel: %v", err)
	}
	sched.slots = n
	sched.cond = sync.NewCond(&sched.mu)
	return flag.Set("test.parallel", "64")
}

// parallel is t.Parallel for a system test: it runs when a slot is free
// and no test before it in startOrder is still waiting. It is called
// first thing, so that every test is queued (the tests' serial parts all
// run before any parallel one starts) before the first one starts.
func parallel(t *testing.T) {
	name := t.Name()
	sched.mu.Lock()
	sched.waiting[name] = true
	sched.mu.Unlock()
	t.Parallel()
	queued := time.Now()
	sched.mu.Lock()
	for sched.running >= sched.slots || nextTest() != name {
		sched.cond.Wait()
	}
	delete(sched.waiting, name)
	sched.running++
	// The next in line may fit in another slot: it checks again.
	sched.cond.Broadcast()
	sched.mu.Unlock()
	// A parallel test's time counts from its start, waits included.
	t.Logf("started after %s in the queue", time.Since(queued).Round(time.Second))
	t.Cleanup(func() {
		sched.mu.Lock()
		sched.running--
		sched.cond.Broadcast()
		sched.mu.Unlock()
	})
}

// nextTest is the waiting test that starts next (sched.mu held).
func nextTest() string {
	rank := func(name string) int {
		if i := slices.Index(startOrder, name); i >= 0 {
			return i
		}
		return len(startOrder)
	}
	best := ""
	for name := range sched.waiting {
		if best == "" || rank(name) < rank(best) || rank(name) == rank(best) && name < best {
			best = name
		}
	}
	return best
}
