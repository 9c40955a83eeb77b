package bench

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Pinning measures the VPS as it is deployed. In the product only Caddy,
// frps and the daemon spend the VPS's processor; frpc and the origin run
// on the machine behind NAT, and the load comes from the internet. On one
// box the pinned figures give the VPS's processes one CPU (the "VPS set")
// and everything else (the load generator, frpc, the origin, the peers'
// machine side) the others, so that what the VPS side costs and carries is
// read on its own instead of shared with the load.

// cpuSplit is the VPS set, the rest, and every CPU the bench may use.
type cpuSplit struct{ VPS, Rest, All unix.CPUSet }

// splitCPUs gives the VPS the first CPU the bench may run on and the rest
// the others. It fails below 2 CPUs: there is nothing to split.
func splitCPUs() (cpuSplit, error) {
	var s cpuSplit
	if err := unix.SchedGetaffinity(0, &s.All); err != nil {
		return s, fmt.Errorf("sched_getaffinity: %w", err)
	}
	if n := s.All.Count(); n < 2 {
		return s, fmt.Errorf("pinning needs 2 CPUs; the bench may use %d", n)
	}
	first := true
	for c := 0; c < 1024; c++ {
		if !s.All.IsSet(c) {
			continue
		}
		if first {
			s.VPS.Set(c)
			first = false
		} else {
			s.Rest.Set(c)
		}
	}
	return s, nil
}

// cpuList is a set as taskset prints it ("0", "1-3").
func cpuList(set unix.CPUSet) string {
	var parts []string
	for c := 0; c < 1024; c++ {
		if !set.IsSet(c) {
			continue
		}
		e := c
		for e+1 < 1024 && set.IsSet(e+1) {
			e++
		}
		if e == c {
			parts = append(parts, strconv.Itoa(c))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", c, e))
		}
		c = e
	}
	return strings.Join(parts, ",")
}

// setAffinity puts every thread of pid, and of each of its descendants
// when tree is set, on set. Threads and children made later inherit it
// from their parent.
func setAffinity(pid int, set unix.CPUSet, tree bool) error {
	pids := []int{pid}
	if tree {
		pids = withDescendants(pid)
	}
	for _, p := range pids {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		if err != nil {
			if p == pid {
				return err
			}
			continue // a child that ended meanwhile
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("sched_setaffinity %d: %w", tid, err)
			}
		}
	}
	return nil
}

// withDescendants is pid and every live process below it.
func withDescendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// treeCPU is the processor time pid and its live descendants have used
// (sshd serves each connection in a child of its own).
func treeCPU(pid int) time.Duration {
	var t time.Duration
	for _, p := range withDescendants(pid) {
		t += statCPU(p, false)
	}
	return t
}

// side is which set a process runs on in the pinned figures.
type side int

const (
	onVPS side = iota
	onRest
)

// pinned is one process of a pinned figure.
type pinned struct {
	p    *Proc
	side side
}

// Pin puts the world's processes on their sets (on) or back on every CPU
// (off). The bench itself (the load generator and the origin) runs on the
// rest while pinned.
func (w *World) Pin(on bool) error {
	if w.cpus.All.Count() == 0 {
		s, err := splitCPUs()
		if err != nil {
			return err
		}
		w.cpus = s
	}
	set := func(s side) unix.CPUSet {
		switch {
		case !on:
			return w.cpus.All
		case s == onVPS:
			return w.cpus.VPS
		default:
			return w.cpus.Rest
		}
	}
	// Caddy starts again on its set, named explicitly: a child takes the
	// affinity of the bench's thread that starts it, which may be pinned.
	caddyCPUs, had := cpuList(set(onVPS)), w.caddyCPUs
	if had == "" {
		had = cpuList(w.cpus.All)
	}
	if w.Caddy != nil && caddyCPUs != had {
		if err := w.startCaddy(caddyCPUs); err != nil {
			return fmt.Errorf("restart Caddy on CPU %s: %w", caddyCPUs, err)
		}
	}
	for _, x := range w.pinnable() {
		if x.p == nil || x.p.Cmd.Process == nil {
			continue
		}
		if err := setAffinity(x.p.Cmd.Process.Pid, set(x.side), true); err != nil {
			return fmt.Errorf("pin %s: %w", x.p.Name, err)
		}
	}
	// The bench's own threads only: its children are placed above.
	if err := setAffinity(os.Getpid(), set(onRest), false); err != nil {
		return fmt.Errorf("pin the bench: %w", err)
	}
	w.pinnedNow = on
	return nil
}

// pinnable lists the world's processes and where each runs when pinned.
func (w *World) pinnable() []pinned {
	ps := []pinned{
		{w.Caddy, onVPS}, {w.FRPS, onVPS}, {w.Daemon.Proc, onVPS},
		{w.FRPC, onRest}, {w.Iperf, onRest}, {w.Baseline, onVPS},
	}
	// The relays: the one that faces the target is the machine's.
	for _, r := range []RelayPair{w.RelayHTTP, w.RelayIperf} {
		for i, p := range r.Procs {
			s := onVPS
			if i == 0 {
				s = onRest
			}
			ps = append(ps, pinned{p, s})
		}
	}
	if pe := w.peers; pe != nil {
		ps = append(ps, pinned{pe.SSHD, onVPS}, pinned{pe.SSH, onRest},
			pinned{pe.VhostFRPS, onVPS}, pinned{pe.VhostFRPC, onRest})
	}
	return ps
}

// pinLabel says how the pinned figures ran, for their rows.
func (w *World) pinLabel() string {
	return fmt.Sprintf("pinned: Caddy, frps and the daemon on CPU %s; the load, frpc and the origin on CPU %s",
		cpuList(w.cpus.VPS), cpuList(w.cpus.Rest))
}

// setBusy is the time the CPUs of set have been busy since boot
// (/proc/stat's cpuN lines).
func setBusy(set unix.CPUSet) time.Duration {
	return procStatBusy(func(name string) bool {
		n, err := strconv.Atoi(strings.TrimPrefix(name, "cpu"))
		return err == nil && set.IsSet(n)
	})
}
