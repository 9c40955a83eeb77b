package bench

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// TestSmoke runs every figure of `make bench` briefly, so the benches
// cannot rot: each must measure something, against the real parts, without
// an error. It checks that a number came out, never how good it is (that is
// what `make bench` and BENCH.md are for).
func TestSmoke(t *testing.T) {
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	testutil.FRP() // builds bin/frps and bin/frpc when missing
	bins, err := FindBins(root)
	if err != nil {
		t.Fatal(err)
	}
	// Load phases of 0.3 s: enough requests for every figure to come out
	// (thousands a phase), and 12 CPU-s less than 1 s phases.
	// Each line says when, so a slow figure shows.
	t0 := time.Now()
	o := Options{Bins: bins, Dir: t.TempDir(), Duration: 300 * time.Millisecond, Machines: 5, Tunnels: 20, Registrations: 50, Settle: 0.1,
		OpenLoopRates: []int{250, 500, 1000}, FleetSizes: []int{50},
		Log: func(f string, a ...any) { t.Logf("%5.1fs "+f, append([]any{time.Since(t0).Seconds()}, a...)...) }}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rows, err := Run(ctx, o, Figures, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(Figures) {
		t.Fatalf("%d rows for %d figures", len(rows), len(Figures))
	}
	var md strings.Builder
	WriteMarkdown(&md, rows, o, 1)
	table, _, _ := strings.Cut(md.String(), "\n## ")
	if !strings.Contains(table, "| figure | goal | measured |") || strings.Count(table, "\n| ") != len(rows)+1 ||
		!strings.Contains(md.String(), "## A fleet as it grows") {
		t.Fatalf("BENCH.md table:\n%s", md.String())
	}
	// The table first, the failures after it: the last lines of a
	// failed run name what failed.
	t.Log("\n" + md.String())
	for i, r := range rows {
		// How fast the machine is is the figure's business, not the
		// test's: on a busy machine Caddy alone may hold none of the
		// open-loop rates, and the row says so.
		if strings.HasPrefix(Figures[i].Key, "openloop") && strings.HasPrefix(r.Measured, openLoopNone) {
			t.Logf("%s: %s (a busy machine)", Figures[i].Key, r.Measured)
			continue
		}
		if strings.Contains(r.Measured, "error:") || r.Value <= 0 {
			t.Errorf("%s: %q (value %v)", Figures[i].Key, r.Measured, r.Value)
		}
		// The tunnel figures carry the relay pair's, and the relays carried
		// traffic.
		switch Figures[i].Key {
		case "tcp", "http", "tcp-pinned":
			m := relayFigure.FindStringSubmatch(r.Measured)
			if m == nil || m[1] == "0" || m[1] == "0.00" || strings.Contains(m[0], "success 0.00%") {
				t.Errorf("%s: nothing through the relay pair in %q", Figures[i].Key, r.Measured)
			}
		case "openloop", "openloop-pinned":
			// Where each path's p99 crosses 20 ms comes out for the relays
			// and the tunnel (how high is the machine's business).
			for _, path := range []string{relayPair, "the tunnel"} {
				if !regexp.MustCompile(regexp.QuoteMeta(path) + ` holds (every rate tried, up to )?\d+`).MatchString(r.Measured) {
					t.Errorf("%s: no crossing for %s in %q", Figures[i].Key, path, r.Measured)
				}
			}
		case "http-pinned":
			// Every path, peers included, carried requests and cost the
			// VPS processor time.
			paths := pinnedPath.FindAllStringSubmatch(r.Measured, -1)
			if len(paths) != 5 {
				t.Errorf("http-pinned: %d paths, want 5, in %q", len(paths), r.Measured)
			}
			for _, m := range paths {
				if m[2] == "0" || m[3] == "0.0" {
					t.Errorf("http-pinned: %s carried %s req/s at %s µs in %q", m[1], m[2], m[3], r.Measured)
				}
			}
		}
	}
}

var pinnedPath = regexp.MustCompile(`(?:^|; )([^;]+?) (\d+) req/s, VPS CPU ([\d.]+) µs per request`)

var relayFigure = regexp.MustCompile(relayPair + ` (?:at \d+: success [\d.]+%, p99 )?([\d.]+)`)

// BenchmarkRender10kTunnels: every generated file for 10,000 tunnels.
func BenchmarkRender10kTunnels(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if err := RenderAll(10000); err != nil {
			b.Fatal(err)
		}
	}
}

func TestMain(m *testing.M) {
	ServeBaseline()
	os.Exit(m.Run())
}

// TestFreePortNeverRepeats: the ports one process is handed are distinct,
// so that the daemon's five listeners never get the same one, also after
// a garbage collection (which once closed the lock files of ports whose
// release nobody kept).
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for i := range 300 {
		if i%20 == 0 {
			runtime.GC()
		}
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice (call %d)", p, i+1)
		}
		seen[p] = true
	}
}

// TestEnginesRunAsInstalled: the bench starts frps and frpc (and the relays
// in their places) with the environment their installed units give them.
func TestEnginesRunAsInstalled(t *testing.T) {
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	testutil.FRP()
	bins, err := FindBins(root)
	if err != nil {
		t.Fatal(err)
	}
	for name, env := range map[string][]string{"revtunnel-server.service": bins.ServerEnv, "the machines' frpc unit": bins.ClientEnv} {
		if !slices.Contains(env, "GOMAXPROCS=1") {
			t.Errorf("%s: environment %q, want GOMAXPROCS=1", name, env)
		}
	}
}

// TestMeansRead: each sentence of BENCH.md's "What it means for a VPS"
// takes its figure's value and reads as words (no verb fmt did not know).
func TestMeansRead(t *testing.T) {
	for key, m := range means {
		if s := fmt.Sprintf(m, 12.5); strings.Contains(s, "%!") {
			t.Errorf("%s: %q", key, s)
		}
	}
}
