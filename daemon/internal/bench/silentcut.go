package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// cutRuleset drops every packet in the machine's namespace: to frps the
// machine falls silent, as behind a pulled cable or a dead NAT mapping,
// with no reset or FIN reaching it.
const cutRuleset = `table inet tsbcut {
	chain in { type filter hook input priority -300; policy drop; }
	chain out { type filter hook output priority -300; policy drop; }
}
`

var serverAddrLine = regexp.MustCompile(`(?m)^serverAddr = .*$`)

// SilentCut: a second machine whose frpc runs in a network namespace the
// bench makes, joined to this host by a veth pair on a test subnet
// (198.18.0.0/15, set aside for benchmarks by RFC 2544). An nftables rule
// in that namespace then drops every packet, and the figure is the time
// until the daemon shows the machine offline. Needs root, ip and nft.
func (w *World) SilentCut(ctx context.Context) Row {
	row := Row{Figure: "network cut silently (frpc in a namespace, every packet dropped) → machine `offline`", Goal: "< 15 s", Baseline: "none (absolute)"}
	fail := func(err error) Row {
		row.Measured = "error: " + err.Error()
		return row
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fail(fmt.Errorf("%s is missing (scripts/install-deps.sh installs it)", tool))
		}
	}
	if os.Geteuid() != 0 {
		return fail(fmt.Errorf("the silent cut needs root (network namespaces)"))
	}
	w.cuts++
	pid := os.Getpid()
	suffix := fmt.Sprintf("%d%d", pid%10000, w.cuts%10)
	ns, hostIf, nsIf := "tsbcut"+suffix, "tsbh"+suffix, "tsbn"+suffix
	// A /30 of 198.18.0.0/15 picked from the process id, so that two
	// benches at once do not collide.
	third, fourth := (pid>>6)&0xff, (pid&63)*4
	hostIP := fmt.Sprintf("198.18.%d.%d", third, fourth+1)
	nsIP := fmt.Sprintf("198.18.%d.%d", third, fourth+2)
	var frpc *Proc
	defer func() {
		frpc.Kill(syscall.SIGKILL)
		ipCmd("netns", "del", ns)
		ipCmd("link", "del", hostIf) // gone with the namespace; this is for a half-made setup
	}()
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"link", "add", hostIf, "type", "veth", "peer", "name", nsIf, "netns", ns},
		{"addr", "add", hostIP + "/30", "dev", hostIf},
		{"link", "set", hostIf, "up"},
		{"-n", ns, "addr", "add", nsIP + "/30", "dev", nsIf},
		{"-n", ns, "link", "set", nsIf, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
	} {
		if err := ipCmd(args...); err != nil {
			return fail(err)
		}
	}

	d := w.Daemon
	name := fmt.Sprintf("bench-cut-%d", w.cuts)
	tok, err := d.NewToken()
	if err != nil {
		return fail(err)
	}
	if _, err := d.Register(tok, name); err != nil {
		return fail(err)
	}
	id, err := d.MachineID(name)
	if err != nil {
		return fail(err)
	}
	conf, err := d.ClientConfig(id)
	if err != nil {
		return fail(err)
	}
	conf = serverAddrLine.ReplaceAllString(conf, fmt.Sprintf("serverAddr = '%s'", hostIP))
	path, err := writeClientConfig(w.opts.Dir, name, conf)
	if err != nil {
		return fail(err)
	}
	if frpc, err = StartProcEnv("frpc "+name, w.opts.Bins.ClientEnv, "ip", "netns", "exec", ns, w.opts.Bins.FRPC, "-c", path); err != nil {
		return fail(err)
	}
	if err := waitFor(ctx, 20*time.Second, name+" online", func() error { return w.statusOf(id, "online") }); err != nil {
		return fail(fmt.Errorf("%v\n%s", err, frpc.Out.String()))
	}
	// Let a heartbeat or two pass, as on a machine that has been up a while.
	time.Sleep(time.Second)

	cut := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cut.Stdin = strings.NewReader(cutRuleset)
	if out, err := cut.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("nft in %s: %v: %s", ns, err, out))
	}
	t0 := time.Now()
	err = waitFor(ctx, 120*time.Second, name+" offline", func() error { return w.statusOf(id, "offline") })
	took := time.Since(t0)
	if err != nil {
		return fail(err)
	}
	row.Measured = took.Round(10 * time.Millisecond).String()
	row.Value = took.Seconds()
	row.Met = took < 15*time.Second
	return row
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
