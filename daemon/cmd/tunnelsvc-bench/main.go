// Command tunnelsvc-bench measures the performance table of `make bench`
// against the real daemon, frps, frpc and Caddy on loopback, and writes
// BENCH.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/bench"
)

func main() {
	bench.ServeBaseline()
	var (
		out      = flag.String("out", "BENCH.md", "where to write the table (- for standard output)")
		runs     = flag.Int("runs", 5, "runs per figure; the median is reported")
		duration = flag.Duration("duration", 10*time.Second, "length of each load phase")
		only     = flag.String("only", "", "comma-separated figures to measure (default: all)")
		machines = flag.Int("machines", 1000, "machines in the memory figure")
		tunnels  = flag.Int("tunnels", 10000, "tunnels in the memory figure")
		regs     = flag.Int("registrations", 500, "registrations in the registration figure")
		root     = flag.String("root", ".", "the repository (bin/ holds the built binaries)")
		fleet    = flag.String("fleet", "", "comma-separated fleet sizes of the fleet figure (default 1000,3000,10000)")
	)
	flag.Parse()
	var sizes []int
	for _, f := range strings.FieldsFunc(*fleet, func(r rune) bool { return r == ',' }) {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "tunnelsvc-bench: -fleet: %q is not a number of machines\n", f)
			os.Exit(2)
		}
		sizes = append(sizes, n)
	}
	if err := run(*out, *runs, *duration, *only, *machines, *tunnels, *regs, *root, sizes); err != nil {
		fmt.Fprintln(os.Stderr, "tunnelsvc-bench:", err)
		os.Exit(1)
	}
}

func run(out string, runs int, duration time.Duration, only string, machines, tunnels, regs int, root string, fleet []int) error {
	bins, err := bench.FindBins(root)
	if err != nil {
		return err
	}
	var keys []string
	if only != "" {
		keys = strings.Split(only, ",")
	}
	figs, err := bench.Select(keys)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "tunnelsvc-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := bench.Options{Bins: bins, Dir: dir, Duration: duration, Machines: machines, Tunnels: tunnels, Registrations: regs, FleetSizes: fleet, FleetRuns: runs,
		Log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }}
	rows, err := bench.Run(ctx, o, figs, runs)
	if err != nil {
		return err
	}
	w := os.Stdout
	if out != "-" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	bench.WriteMarkdown(w, rows, o, runs)
	if out != "-" {
		bench.WriteMarkdown(os.Stdout, rows, o, runs)
	}
	return nil
}
