package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// EdgeChange: two edges (two daemons on one PostgreSQL database, the
// sealing key copied as `tunnelsvc edge join` does). A password tunnel
// made through edge A's API is timed from A's answer until edge B's access
// gate asks for the password for its host: the change made on one edge,
// applied on the other. The first tunnel warms both up and is not counted.
func EdgeChange(o Options) Row {
	const rounds = 10
	row := Row{
		Figure:   fmt.Sprintf("a change on edge A applied on edge B: a password tunnel made through A, until B's access gate guards it (median and slowest of %d, two daemons on one PostgreSQL)", rounds),
		Goal:     "< 1 s",
		Baseline: "—",
	}
	fail := func(err error) Row { row.Measured = "error: " + err.Error(); return row }
	a, b, err := o.twoEdges("edge")
	if err != nil {
		return fail(err)
	}
	defer a.Stop()
	defer b.Stop()
	const domain = "bench.example.test"
	if err := a.Call(a.Client, "POST", "/api/local/skip", map[string]string{"domain": domain}, nil); err != nil {
		return fail(err)
	}
	tok, err := a.NewToken()
	if err != nil {
		return fail(err)
	}
	reg, err := a.Register(tok, "edge-bench")
	if err != nil {
		return fail(err)
	}
	m := regexp.MustCompile(`(?m)^user = 'm(\d+)'`).FindStringSubmatch(reg.ClientConfig)
	if m == nil {
		return fail(fmt.Errorf("no machine id in the client config"))
	}
	machine, _ := strconv.ParseInt(m[1], 10, 64)
	last := 0
	guarded := func(host string) bool { return guardedBy(b, host, &last) }
	var lastA int
	var took []time.Duration
	for i := 0; i <= rounds; i++ {
		sub := fmt.Sprintf("edge%d", i)
		body := map[string]any{"machine_id": machine, "name": sub, "kind": "http", "local_port": 8080, "subdomain": sub,
			"access": "password", "password": "correct horse battery staple"}
		if err := a.Call(a.Client, "POST", "/api/tunnels", body, nil); err != nil {
			return fail(err)
		}
		t0 := time.Now()
		for !guarded(sub + "." + domain) {
			if time.Since(t0) > 15*time.Second {
				guardedBy(a, sub+"."+domain, &lastA)
				return fail(fmt.Errorf("edge B did not guard %s.%s within 15 s (its gate answered %d, A's %d; daemon: %s)", sub, domain, last, lastA, lastError(b.Out.String())))
			}
			time.Sleep(2 * time.Millisecond)
		}
		if i > 0 {
			took = append(took, time.Since(t0))
		}
	}
	slowest := took[0]
	for _, d := range took {
		slowest = max(slowest, d)
	}
	med := median(took)
	row.Measured = fmt.Sprintf("median %s, slowest %s", med.Round(time.Millisecond), slowest.Round(time.Millisecond))
	row.Value = med.Seconds()
	row.Met = slowest < time.Second
	return row
}

// guardedBy reports whether d's access gate asks for a password at host,
// keeping the status it answered in last.
func guardedBy(d *Daemon, host string, last *int) bool {
	{
		req, _ := http.NewRequest("GET", "http://"+d.GateAddr+"/check", nil)
		req.Host = host
		req.Header.Set("X-Forwarded-Method", "GET")
		req.Header.Set("X-Forwarded-Uri", "/")
		res, err := noRedirects.Do(req)
		if err != nil {
			return false
		}
		res.Body.Close()
		*last = res.StatusCode
		return res.StatusCode == http.StatusFound
	}
}

// noRedirects sees the gate's redirect to its sign-in page as it is.
var noRedirects = &http.Client{Timeout: 10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// twoEdges starts edge A and edge B (directories <prefix>-a and -b): two
// daemons on one new PostgreSQL database, the operator set up on A, A's
// sealing key copied to B as `tunnelsvc edge join` does.
func (o Options) twoEdges(prefix string) (a, b *Daemon, err error) {
	url, err := o.postgresURL()
	if err != nil {
		return nil, nil, err
	}
	adir, bdir := filepath.Join(o.Dir, prefix+"-a"), filepath.Join(o.Dir, prefix+"-b")
	a, err = StartDaemonArgs(o.Bins, adir, 0, url, "--edge-name", "edge-a")
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*Daemon, *Daemon, error) {
		a.Stop()
		if b != nil {
			b.Stop()
		}
		return nil, nil, err
	}
	if err := a.Setup(); err != nil {
		return fail(err)
	}
	key, err := os.ReadFile(filepath.Join(adir, "data", "secret.key"))
	if err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(filepath.Join(bdir, "data"), 0o700); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(bdir, "data", "secret.key"), key, 0o600); err != nil {
		return fail(err)
	}
	// A machine's ports are the same on every edge: one range for both.
	if b, err = StartDaemonArgs(o.Bins, bdir, 0, url, "--edge-name", "edge-b", "--tunnel-ports", fmt.Sprintf("%d-%d", a.PortLo, a.PortHi)); err != nil {
		return fail(err)
	}
	b.PortLo, b.PortHi = a.PortLo, a.PortHi
	if err := b.Login(); err != nil {
		return fail(err)
	}
	return a, b, nil
}

// EdgeDeath: two edges on one PostgreSQL, each with its frps (edge B's
// tunnel listeners on 127.0.0.2, since both share this host's loopback),
// and a machine with a tunnel client for each edge and an echo server
// behind a TCP tunnel. A client sends a line through edge A and, when A
// does not answer, through B: what a client given both edges' addresses
// does (DNS round robin). Edge A dies in two ways: frozen (its frps and
// daemon stopped with SIGSTOP: connections open, nothing answers, and the
// client gives up on an address after 1 s), then killed (connections
// refused). The figure is the time from each death to the first answer
// through B.
//
// Edge B's client config is the machine's main one with B's port: the
// bench runs no agent to deliver the set (TestEveryMachineReachesEveryEdge
// and the two-edge system test check the real set).
func EdgeDeath(o Options) Row {
	row := Row{
		Figure:   "an edge's death to the first answer through the other edge, a client retrying the other address (edge frozen: 1 s timeout per address; edge killed)",
		Goal:     "< 5 s",
		Baseline: "—",
	}
	fail := func(err error) Row { row.Measured = "error: " + err.Error(); return row }
	a, b, err := o.twoEdges("death")
	if err != nil {
		return fail(err)
	}
	defer a.Stop()
	defer b.Stop()
	frpsA, err := StartFRPS(o.Bins, a)
	if err != nil {
		return fail(err)
	}
	defer frpsA.Kill(syscall.SIGKILL)
	frpsB, err := StartFRPSOn(o.Bins, b, "127.0.0.2")
	if err != nil {
		return fail(err)
	}
	defer frpsB.Kill(syscall.SIGTERM)

	// The machine's service: a line echoed back.
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	tok, err := a.NewToken()
	if err != nil {
		return fail(err)
	}
	if _, err := a.Register(tok, "death-bench"); err != nil {
		return fail(err)
	}
	id, err := a.MachineID("death-bench")
	if err != nil {
		return fail(err)
	}
	tun, err := a.AddTunnel(id, "echo", "tcp", echo.Addr().(*net.TCPAddr).Port, "")
	if err != nil {
		return fail(err)
	}
	conf, err := a.ClientConfig(id)
	if err != nil {
		return fail(err)
	}
	confB := strings.Replace(conf, fmt.Sprintf("serverPort = %d\n", a.FRPSPort), fmt.Sprintf("serverPort = %d\n", b.FRPSPort), 1)
	if confB == conf {
		return fail(fmt.Errorf("no serverPort = %d in the client config", a.FRPSPort))
	}
	for name, c := range map[string]string{"death-a": conf, "death-b": confB} {
		p, err := StartFRPC(o.Bins, o.Dir, name, c)
		if err != nil {
			return fail(err)
		}
		defer p.Kill(syscall.SIGTERM)
	}
	addrA, addrB := fmt.Sprintf("127.0.0.1:%d", tun.RemotePort), fmt.Sprintf("127.0.0.2:%d", tun.RemotePort)
	// ask sends one line through addr and waits up to 1 s for it back.
	ask := func(addr string) error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return err
		}
		line := make([]byte, 5)
		if _, err := io.ReadFull(c, line); err != nil {
			return err
		}
		if string(line) != "ping\n" {
			return fmt.Errorf("answered %q", line)
		}
		return nil
	}
	ctx := context.Background()
	for _, addr := range []string{addrA, addrB} {
		if err := waitFor(ctx, 30*time.Second, "the tunnel through "+addr, func() error { return ask(addr) }); err != nil {
			return fail(err)
		}
	}
	// untilB asks A then B, as a client with both addresses does, until
	// B answers; it returns the time from since.
	untilB := func(since time.Time) (time.Duration, error) {
		for time.Since(since) < 30*time.Second {
			if ask(addrA) == nil {
				continue // A still answers: not dead yet
			}
			if ask(addrB) == nil {
				return time.Since(since), nil
			}
		}
		return 0, fmt.Errorf("edge B did not answer within 30 s of edge A's death")
	}

	// Frozen: everything of edge A stops at once.
	t0 := time.Now()
	for _, p := range []*Proc{frpsA, a.Proc} {
		syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGSTOP)
	}
	frozen, err := untilB(t0)
	for _, p := range []*Proc{frpsA, a.Proc} {
		syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGCONT)
	}
	if err != nil {
		return fail(fmt.Errorf("frozen: %w", err))
	}
	if err := waitFor(ctx, 30*time.Second, "edge A back after the freeze", func() error { return ask(addrA) }); err != nil {
		return fail(err)
	}
	// Killed.
	t0 = time.Now()
	frpsA.Kill(syscall.SIGKILL)
	a.Kill(syscall.SIGKILL)
	killed, err := untilB(t0)
	if err != nil {
		return fail(fmt.Errorf("killed: %w", err))
	}
	row.Measured = fmt.Sprintf("frozen %s, killed %s", frozen.Round(time.Millisecond), killed.Round(time.Millisecond))
	row.Value = max(frozen, killed).Seconds()
	row.Met = max(frozen, killed) < 5*time.Second
	return row
}
