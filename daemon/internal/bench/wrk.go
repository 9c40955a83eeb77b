package bench

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"time"
)

// wrk is the closed-loop load generator of the pinned and API figures: a
// C program with one event loop per thread, which spends a fraction of
// what the in-process vegeta generator spends per request. A generator
// heavier than the server it loads flatters every ratio toward 1.

// wrkLoad is one wrk run's outcome.
type wrkLoad struct {
	Rate     float64 // requests per second, as wrk counts them
	Requests uint64
	Failed   uint64 // non-2xx/3xx answers and socket errors
	P99      time.Duration
}

var (
	wrkRequests = regexp.MustCompile(`(\d+) requests in`)
	wrkRate     = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkSocket   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkP99      = regexp.MustCompile(`(?m)^\s+99%\s+([\d.]+)(us|ms|s)\s*$`)
)

// runWrk loads url for d (whole seconds, at least 1: wrk's unit) with
// conns connections on threads threads, with the given headers ("Name:
// value").
func runWrk(url string, threads, conns int, d time.Duration, headers ...string) (wrkLoad, error) {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	args := []string{"-t" + strconv.Itoa(threads), "-c" + strconv.Itoa(conns), "-d" + strconv.Itoa(secs) + "s", "--latency"}
	for _, h := range headers {
		args = append(args, "-H", h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs+30)*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "wrk", append(args, url)...).CombinedOutput()
	if err != nil {
		return wrkLoad{}, fmt.Errorf("wrk (scripts/install-deps.sh installs it): %v: %s", err, out)
	}
	return parseWrk(string(out))
}

func parseWrk(out string) (wrkLoad, error) {
	var l wrkLoad
	m, r := wrkRequests.FindStringSubmatch(out), wrkRate.FindStringSubmatch(out)
	if m == nil || r == nil {
		return l, fmt.Errorf("wrk printed no totals: %s", out)
	}
	l.Requests, _ = strconv.ParseUint(m[1], 10, 64)
	l.Rate, _ = strconv.ParseFloat(r[1], 64)
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
		n, _ := strconv.ParseUint(m[1], 10, 64)
		l.Failed += n
	}
	if m := wrkSocket.FindStringSubmatch(out); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.ParseUint(s, 10, 64)
			l.Failed += n
		}
	}
	if m := wrkP99.FindStringSubmatch(out); m != nil {
		v, _ := strconv.ParseFloat(m[1], 64)
		unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}[m[2]]
		l.P99 = time.Duration(v * float64(unit))
	}
	return l, nil
}
