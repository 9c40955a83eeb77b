// Package bench measures the figures of `make bench` against the real
// parts: the built daemon binary, real frps and frpc running the configs the
// daemon rendered and answering to its plugin, and a real Caddy running a
// Caddyfile from the daemon's renderer. Every figure is compared with a
// baseline measured in the same run, so the ratio means something on any
// machine. Everything listens on 127.0.0.1 and is stopped by Env.Close.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/bundle"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/portlock"
)

// Password is the operator password every bench environment is set up with.
const Password = "correct horse battery staple"

// Bins are the binaries a bench runs.
type Bins struct {
	Tunnelsvc, FRPS, FRPC, Caddy string
	// Root is the repository (the chaos figure builds its edges there).
	Root string
	// ServerEnv and ClientEnv: the Environment= of the units frps and frpc
	// run under when installed (systemd/revtunnel-server.service, and the
	// unit bootstrap.sh installs from the daemon, package bundle's), so
	// that the bench runs the engines as operators do.
	ServerEnv, ClientEnv []string
}

// FindBins locates the built binaries under root/bin and caddy on PATH.
func FindBins(root string) (Bins, error) {
	b := Bins{
		Root:      root,
		Tunnelsvc: filepath.Join(root, "bin", "tunnelsvc"),
		FRPS:      filepath.Join(root, "bin", "frps"),
		FRPC:      filepath.Join(root, "bin", "frpc"),
	}
	for _, p := range []string{b.Tunnelsvc, b.FRPS, b.FRPC} {
		if _, err := os.Stat(p); err != nil {
			return b, fmt.Errorf("%s is missing: run `make build`", p)
		}
	}
	c, err := exec.LookPath("caddy")
	if err != nil {
		return b, fmt.Errorf("caddy is missing: run scripts/install-deps.sh")
	}
	b.Caddy = c
	unit, err := os.ReadFile(filepath.Join(root, "systemd", "revtunnel-server.service"))
	if err != nil {
		return b, err
	}
	b.ServerEnv = unitEnvironment(string(unit))
	// The frpc unit bootstrap.sh installs is the one the daemon serves,
	// from package bundle.
	b.ClientEnv = unitEnvironment(bundle.ClientUnit())
	return b, nil
}

// unitEnvironment is the variables the Environment= lines of a unit set.
func unitEnvironment(unit string) []string {
	var env []string
	for _, line := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Environment="); ok {
			env = append(env, strings.Fields(v)...)
		}
	}
	return env
}

// FreePort returns a loopback port reserved for this process until it
// exits (portlock.Port: below the kernel's ephemeral range, where
// the thousands of outgoing connections of the load phases cannot take it,
// and never handed to another process or twice to this one; a bench run
// used to fail with "address already in use" when two of one daemon's five
// ports were the same).
func FreePort() (int, error) {
	port, _, err := portlock.Port()
	return port, err
}

// Proc is a child process in its own process group.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Out  *syncBuffer
	done chan struct{}
}

type syncBuffer struct {
	mu   sync.Mutex
	head bytes.Buffer // the first half MiB: how it started
	tail bytes.Buffer // the last half MiB or so: how it ended
	cut  bool         // output between the two was dropped
}

// outputKept is how much of a process's output each end keeps: enough to
// explain a failure, at the start or at the end of a long run.
const outputKept = 512 << 10

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.head.Len() < outputKept {
		return s.head.Write(p)
	}
	s.tail.Write(p)
	if s.tail.Len() > 2*outputKept {
		s.tail.Next(s.tail.Len() - outputKept) // the buffer reuses the room
		s.cut = true
	}
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		return s.head.String() + "\n[… output cut …]\n" + s.tail.String()
	}
	return s.head.String() + s.tail.String()
}

// StartProc starts bin with args; its output is kept for error messages.
func StartProc(name, bin string, args ...string) (*Proc, error) {
	return StartProcEnv(name, nil, bin, args...)
}

// StartProcEnv is StartProc with variables added to the environment.
func StartProcEnv(name string, env []string, bin string, args ...string) (*Proc, error) {
	p := &Proc{Name: name, Cmd: exec.Command(bin, args...), Out: &syncBuffer{}, done: make(chan struct{})}
	if env != nil {
		p.Cmd.Env = append(os.Environ(), env...)
	}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Out, p.Out
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.Cmd.Wait(); close(p.done) }()
	return p, nil
}

// Running reports whether the process has not exited.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Kill sends sig to the process group and waits up to 10 s for the exit.
func (p *Proc) Kill(sig syscall.Signal) {
	if p == nil || !p.Running() {
		return
	}
	syscall.Kill(-p.Cmd.Process.Pid, sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// RSS is the process's resident set in bytes (VmRSS).
func (p *Proc) RSS() (int64, error) { return p.status("VmRSS") }

// RSSAnon is the part of RSS that is the process's own memory (RssAnon:
// heap, stacks); the rest is mostly its executable's pages, shared with
// the page cache, which the kernel drops when memory is short.
func (p *Proc) RSSAnon() (int64, error) { return p.status("RssAnon") }

// status is a kB field of /proc/<pid>/status, in bytes.
func (p *Proc) status(field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(field + `:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		return 0, fmt.Errorf("no %s for %s", field, p.Name)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb * 1024, nil
}

// CPU is the processor time the process has used so far (user + system,
// from /proc; whole process group members are not included).
func (p *Proc) CPU() time.Duration {
	if p == nil || p.Cmd.Process == nil {
		return 0
	}
	return statCPU(p.Cmd.Process.Pid, false)
}

// cpuOf sums the processor time of ps.
func cpuOf(ps ...*Proc) time.Duration {
	var t time.Duration
	for _, p := range ps {
		t += p.CPU()
	}
	return t
}

// machineCPU is the time every processor of the machine has been busy
// since boot (/proc/stat: all but idle and iowait), or 0 where it cannot be
// read.
func machineCPU() time.Duration {
	return procStatBusy(func(name string) bool { return name == "cpu" })
}

// procStatBusy sums the busy time (all but idle and iowait) of the
// /proc/stat lines whose name ("cpu" for the whole machine, "cpuN" for
// one processor) pick accepts; 0 where it cannot be read.
func procStatBusy(pick func(name string) bool) time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	var busy int64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") || !pick(f[0]) {
			continue
		}
		for i, v := range f[1:9] {
			if i == 3 || i == 4 { // idle, iowait
				continue
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			busy += n
		}
	}
	return time.Duration(busy) * time.Second / userHZ
}

// userHZ is the unit of /proc/stat's times (USER_HZ, 100 on Linux).
const userHZ = 100

// waitTCP waits until addr accepts a connection or d passes.
func waitTCP(addr string, d time.Duration, p *Proc) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if p != nil && !p.Running() {
			return fmt.Errorf("%s exited before listening on %s:\n%s", p.Name, addr, p.Out.String())
		}
		if time.Now().After(deadline) {
			out := ""
			if p != nil {
				out = p.Out.String()
			}
			return fmt.Errorf("%s does not listen within %s:\n%s", addr, d, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Daemon is a running `tunnelsvc serve` with an operator session.
type Daemon struct {
	*Proc
	Dir        string
	Base       string
	Listen     string
	PluginAddr string
	GateAddr   string // the access gate's listener (--gate-listen)
	// DashAddr is frps's dashboard API (--frps-dashboard-listen): a free
	// port, so that benches in two worktrees can run side by side.
	DashAddr string
	FRPSPort int
	PortLo   int
	PortHi   int
	Client   *http.Client // carries the operator's session cookie
	Anon     *http.Client
}

// StartDaemon runs the daemon binary on free loopback ports with its data
// in dir. It does not set the password.
func StartDaemon(bins Bins, dir string) (*Daemon, error) {
	return StartDaemonPorts(bins, dir, 0)
}

// StartDaemonPorts is StartDaemon with a tunnel port range of n ports
// (100 when n is 0). Figures that register many machines and run no frps
// need more than a range whose ports frps would bind.
func StartDaemonPorts(bins Bins, dir string, n int) (*Daemon, error) {
	return StartDaemonDB(bins, dir, n, "")
}

// StartDaemonDB is StartDaemonPorts on the database at url (--database;
// the SQLite in the data directory when empty).
func StartDaemonDB(bins Bins, dir string, n int, url string) (*Daemon, error) {
	return StartDaemonArgs(bins, dir, n, url)
}

// StartDaemonArgs is StartDaemonDB with more serve flags.
func StartDaemonArgs(bins Bins, dir string, n int, url string, extra ...string) (*Daemon, error) {
	return StartDaemonEnv(bins, dir, n, url, nil, extra...)
}

// StartDaemonEnv is StartDaemonArgs with variables added to the daemon's
// environment (nil: its own).
func StartDaemonEnv(bins Bins, dir string, n int, url string, env []string, extra ...string) (*Daemon, error) {
	d := &Daemon{Dir: dir}
	ports := make([]int, 5)
	for i := range ports {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	d.Listen = fmt.Sprintf("127.0.0.1:%d", ports[0])
	d.PluginAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	d.FRPSPort = ports[2]
	d.GateAddr = fmt.Sprintf("127.0.0.1:%d", ports[3])
	d.DashAddr = fmt.Sprintf("127.0.0.1:%d", ports[4])
	// A tunnel port range of our own, away from the ephemeral range.
	d.PortLo = 21000 + int(time.Now().UnixNano()%80)*100
	d.PortHi = d.PortLo + 99
	if n > 100 {
		// Below the ephemeral range (32768 on), where a port frps binds
		// is never one a connection of this host holds.
		d.PortLo = max(min(20000, 32767-n+1), 1024)
		d.PortHi = d.PortLo + n - 1
	}
	d.Base = "http://" + d.Listen
	args := []string{"serve",
		"--listen", d.Listen, "--frps-plugin-listen", d.PluginAddr, "--gate-listen", d.GateAddr,
		"--frps-dashboard-listen", d.DashAddr,
		"--data-dir", filepath.Join(dir, "data"), "--system-root", filepath.Join(dir, "root"),
		"--bin-dir", filepath.Dir(bins.FRPS), "--server-host", "127.0.0.1",
		"--frps-port", strconv.Itoa(d.FRPSPort),
		"--tunnel-ports", fmt.Sprintf("%d-%d", d.PortLo, d.PortHi), "--log-level", "warn"}
	if url != "" {
		args = append(args, "--database", url)
	}
	args = append(args, extra...)
	var err error
	d.Proc, err = StartProcEnv("tunnelsvc", env, bins.Tunnelsvc, args...)
	if err != nil {
		return nil, err
	}
	if err := waitTCP(d.Listen, 20*time.Second, d.Proc); err != nil {
		d.Kill(syscall.SIGTERM)
		return nil, err
	}
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	d.Client = &http.Client{Jar: jar, Timeout: 60 * time.Second, Transport: tr}
	d.Anon = &http.Client{Timeout: 60 * time.Second, Transport: tr}
	return d, nil
}

// Call sends a JSON request and decodes the envelope's data into out.
func (d *Daemon) Call(c *http.Client, method, path string, body, out any) error {
	return d.CallAuth(c, method, path, "", body, out)
}

// CallAuth is Call with a bearer token (a machine's agent token) when
// token is not empty.
func (d *Daemon) CallAuth(c *http.Client, method, path, token string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, d.Base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(raw))
	}
	if out == nil {
		return nil
	}
	if s, ok := out.(*string); ok {
		*s = string(raw)
		return nil
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return json.Unmarshal(env.Data, out)
}

// Setup sets the operator password, which also logs the client in.
func (d *Daemon) Setup() error {
	return d.Call(d.Client, "POST", "/api/auth/setup", map[string]string{"password": Password}, nil)
}

// Login logs the client in again.
func (d *Daemon) Login() error {
	return d.Call(d.Client, "POST", "/api/auth/login", map[string]string{"password": Password}, nil)
}

// SessionCookie is the operator's Cookie header.
func (d *Daemon) SessionCookie() string {
	req, _ := http.NewRequest("GET", d.Base, nil)
	var parts []string
	for _, c := range d.Client.Jar.Cookies(req.URL) {
		parts = append(parts, c.Name+"="+c.Value)
	}
	return strings.Join(parts, "; ")
}

// Registration is POST /api/bootstrap's answer.
type Registration struct {
	TunnelPort     int    `json:"tunnel_port"`
	ClientConfig   string `json:"revtunnel_client_config"`
	AgentToken     string `json:"agent_token"`
	AgentLocalPort int    `json:"agent_local_port"`
}

// NewToken creates a bootstrap token.
func (d *Daemon) NewToken() (string, error) {
	var tok struct{ Token string }
	err := d.Call(d.Client, "POST", "/api/bootstrap/tokens", map[string]any{}, &tok)
	return tok.Token, err
}

// Register claims token as machine name, as bootstrap.sh does.
func (d *Daemon) Register(token, name string) (Registration, error) {
	var reg Registration
	err := d.Call(d.Anon, "POST", "/api/bootstrap", map[string]string{"token": token, "name": name, "username": "bench"}, &reg)
	return reg, err
}

// Machine is one row of GET /api/machines.
type Machine struct {
	ID     int64  `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
}

// MachineID finds a machine's id by name.
func (d *Daemon) MachineID(name string) (int64, error) {
	var ms []Machine
	if err := d.Call(d.Client, "GET", "/api/machines", nil, &ms); err != nil {
		return 0, err
	}
	for _, m := range ms {
		if m.Name == name {
			return m.ID, nil
		}
	}
	return 0, fmt.Errorf("no machine %q", name)
}

// Tunnel is what POST /api/tunnels answers.
type Tunnel struct {
	ID         int64  `json:"id"`
	RemotePort int    `json:"remote_port"`
	Subdomain  string `json:"subdomain"`
}

// AddTunnel creates a tunnel for a machine.
func (d *Daemon) AddTunnel(machineID int64, name, kind string, localPort int, subdomain string) (Tunnel, error) {
	body := map[string]any{"machine_id": machineID, "name": name, "kind": kind, "local_port": localPort}
	if subdomain != "" {
		body["subdomain"] = subdomain
	}
	var t Tunnel
	err := d.Call(d.Client, "POST", "/api/tunnels", body, &t)
	return t, err
}

// ClientConfig is the machine's current frpc config.
func (d *Daemon) ClientConfig(machineID int64) (string, error) {
	var conf string
	err := d.Call(d.Client, "GET", fmt.Sprintf("/api/machines/%d/revtunnel-client", machineID), nil, &conf)
	return conf, err
}

// ServerConfigPath is where the daemon wrote frps's config.
func (d *Daemon) ServerConfigPath() string {
	return filepath.Join(d.Dir, "root", "etc", "revtunnel", "server.toml")
}

// Stop ends the daemon.
func (d *Daemon) Stop() { d.Kill(syscall.SIGTERM) }

// StartFRPS runs frps on the config the daemon wrote at start. The config
// names the certificate and key where revtunnel-server.service copies them
// (its runtime directory); here they are read where the daemon wrote them.
func StartFRPS(bins Bins, d *Daemon) (*Proc, error) { return StartFRPSOn(bins, d, "") }

var proxyBind = regexp.MustCompile(`(?m)^proxyBindAddr = .*$`)

// StartFRPSOn is StartFRPS with the tunnels' listeners on proxyAddr (a
// loopback address) instead of the daemon's: two edges sharing this
// host's loopback cannot both listen on a machine's ports at 127.0.0.1.
func StartFRPSOn(bins Bins, d *Daemon, proxyAddr string) (*Proc, error) {
	var conf []byte
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		conf, err = os.ReadFile(d.ServerConfigPath())
		if err == nil && len(conf) > 0 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the daemon wrote no %s: %v", d.ServerConfigPath(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	etc := filepath.Dir(d.ServerConfigPath())
	conf = []byte(strings.ReplaceAll(string(conf), "/run/revtunnel-server/", etc+"/"))
	if proxyAddr != "" {
		conf = proxyBind.ReplaceAll(conf, []byte("proxyBindAddr = '"+proxyAddr+"'"))
	}
	path := filepath.Join(d.Dir, "frps.toml")
	if err := os.WriteFile(path, conf, 0o600); err != nil {
		return nil, err
	}
	p, err := StartProcEnv("frps", bins.ServerEnv, bins.FRPS, "-c", path)
	if err != nil {
		return nil, err
	}
	if err := waitTCP(fmt.Sprintf("127.0.0.1:%d", d.FRPSPort), 15*time.Second, p); err != nil {
		p.Kill(syscall.SIGTERM)
		return nil, err
	}
	return p, nil
}

var (
	adminPort = regexp.MustCompile(`(?m)^port = \d+$`)
	trustedCA = regexp.MustCompile(`(?m)^trustedCaFile = '[^']*'$`)
)

// StartFRPC writes conf (with a free admin port, several frpc share this
// loopback) and runs frpc on it.
func StartFRPC(bins Bins, dir, name, conf string) (*Proc, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	conf = adminPort.ReplaceAllString(conf, fmt.Sprintf("port = %d", port))
	path, err := writeClientConfig(dir, name, conf)
	if err != nil {
		return nil, err
	}
	return StartProcEnv("frpc "+name, bins.ClientEnv, bins.FRPC, "-c", path)
}

// writeClientConfig writes a machine's frpc config to dir/name.toml. The
// config carries the tunnel CA and names its own path as the CA file: that
// is pointed at where this copy lives.
func writeClientConfig(dir, name, conf string) (string, error) {
	path := filepath.Join(dir, name+".toml")
	conf = trustedCA.ReplaceAllString(conf, "trustedCaFile = '"+path+"'")
	return path, os.WriteFile(path, []byte(conf), 0o600)
}

// waitFor polls cond every 20 ms until it holds or d passes.
func waitFor(ctx context.Context, d time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: not within %s: %v", what, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
