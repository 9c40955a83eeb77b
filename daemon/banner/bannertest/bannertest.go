// Package bannertest starts a real, private fail2ban-server for tests: its
// own config dir, socket, pidfile and log files under t.TempDir(), and a
// dummy ban action that writes to a file instead of the host's firewall.
package bannertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/banner"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
)

// Instance is one private fail2ban.
type Instance struct {
	t       testing.TB
	Dir     string
	ConfDir string
	Socket  string
	PidFile string
	// AuthLog is the file the tunnelsvc-auth jail watches (the daemon's
	// log lines go here instead of the journal).
	AuthLog string
	SSHDLog string
	// BanFile is where the dummy action writes "+ip" and "-ip".
	BanFile string
	Run     cmdrun.Runner

	mu      sync.Mutex
	reloads int
}

// New prepares the config dir (a copy of the host's /etc/fail2ban without
// its jail.d) but starts nothing: the first ReloadOrRestart starts the
// server, as systemd would. It skips the test when fail2ban is missing.
func New(t testing.TB) *Instance {
	t.Helper()
	for _, tool := range []string{"fail2ban-client", "fail2ban-server"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/install-deps.sh installs fail2ban)", tool)
		}
	}
	dir := t.TempDir()
	in := &Instance{
		t: t, Dir: dir, ConfDir: filepath.Join(dir, "conf"),
		Socket: filepath.Join(dir, "f2b.sock"), PidFile: filepath.Join(dir, "f2b.pid"),
		AuthLog: filepath.Join(dir, "tunnelsvc.log"), SSHDLog: filepath.Join(dir, "auth.log"),
		BanFile: filepath.Join(dir, "bans"), Run: cmdrun.Exec{Timeout: 20 * time.Second},
	}
	if out, err := exec.Command("cp", "-r", "/etc/fail2ban", in.ConfDir).CombinedOutput(); err != nil {
		t.Fatalf("copy /etc/fail2ban: %v %s", err, out)
	}
	// Only our jail file may enable jails here.
	os.RemoveAll(filepath.Join(in.ConfDir, "jail.d"))
	os.MkdirAll(filepath.Join(in.ConfDir, "jail.d"), 0o755)
	local := fmt.Sprintf("[Definition]\nloglevel = INFO\nlogtarget = %s\ndbfile = :memory:\nallowipv6 = auto\n", filepath.Join(dir, "fail2ban.log"))
	must(t, os.WriteFile(filepath.Join(in.ConfDir, "fail2ban.local"), []byte(local), 0o644))
	must(t, os.WriteFile(in.AuthLog, nil, 0o644))
	must(t, os.WriteFile(in.SSHDLog, nil, 0o644))
	t.Cleanup(in.stop)
	return in
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Sources points the managed jails at the instance's files and dummy action.
func (in *Instance) Sources() banner.Sources {
	return banner.Sources{SSHDLogPath: in.SSHDLog, AuthLogPath: in.AuthLog, Action: "dummy[target=" + in.BanFile + "]"}
}

// Options returns banner options wired to this instance.
func (in *Instance) Options() banner.Options {
	return banner.Options{Run: in.Run, Units: in, ConfDir: in.ConfDir, Socket: in.Socket, Sources: in.Sources()}
}

// ReloadOrRestart plays systemd's part: reload a running server, start a
// stopped one.
func (in *Instance) ReloadOrRestart(ctx context.Context, name string) error {
	if name != banner.Unit {
		return fmt.Errorf("unexpected unit %s", name)
	}
	in.mu.Lock()
	in.reloads++
	in.mu.Unlock()
	cmd := "reload"
	if in.Client(ctx, "ping").Err != nil {
		cmd = "start"
	}
	res := in.Run.Run(ctx, "fail2ban-client", "-c", in.ConfDir, "-s", in.Socket, "-p", in.PidFile, cmd)
	if res.Err != nil {
		return fmt.Errorf("fail2ban-client %s: %s", cmd, res.Words())
	}
	return nil
}

// Reloads counts ReloadOrRestart calls.
func (in *Instance) Reloads() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.reloads
}

// Client runs fail2ban-client against the instance's socket.
func (in *Instance) Client(ctx context.Context, args ...string) cmdrun.Result {
	return in.Run.Run(ctx, "fail2ban-client", append([]string{"-s", in.Socket}, args...)...)
}

// Get returns `fail2ban-client get <jail> <what>`, trimmed.
func (in *Instance) Get(jail, what string) string {
	in.t.Helper()
	res := in.Client(context.Background(), "get", jail, what)
	if res.Err != nil {
		in.t.Fatalf("get %s %s: %s", jail, what, res.Words())
	}
	return strings.TrimSpace(res.Stdout)
}

// AuthFailures appends n daemon auth-failure lines for ip to the watched
// log, exactly as the daemon's slog text handler writes them.
func (in *Instance) AuthFailures(ip string, n int) {
	in.t.Helper()
	f, err := os.OpenFile(in.AuthLog, os.O_APPEND|os.O_WRONLY, 0)
	must(in.t, err)
	defer f.Close()
	for i := 0; i < n; i++ {
		ts := time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00")
		fmt.Fprintf(f, "time=%s level=WARN msg=\"auth failure from %s\" kind=LOGIN_FAILED detail=\"\"\n", ts, ip)
	}
}

// Banned returns the addresses fail2ban currently bans in jail.
func (in *Instance) Banned(jail string) []string {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	j, err := banner.JailStatus(ctx, in.Socket, jail)
	if err != nil {
		in.t.Fatalf("status of jail %s: %v", jail, err)
	}
	return j.Banned
}

// WaitFor polls cond every 100 ms for at most d.
func WaitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (in *Instance) stop() {
	ctx := context.Background()
	if in.Client(ctx, "ping").Err == nil {
		in.Client(ctx, "stop")
	}
	// fail2ban removes its pid file on exit; one still there after a few
	// seconds belongs to a server that did not stop.
	if WaitFor(5*time.Second, func() bool { _, err := os.Stat(in.PidFile); return err != nil }) {
		return
	}
	if b, err := os.ReadFile(in.PidFile); err == nil {
		var pid int
		if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 0 {
			if p, err := os.FindProcess(pid); err == nil {
				p.Kill()
			}
		}
	}
}
