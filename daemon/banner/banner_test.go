package banner_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/banner"
	"github.com/tunnelsvc/tunnelsvc/daemon/banner/bannertest"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if got != string(want) {
		t.Fatalf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// fail2banTest runs the real `fail2ban-client --test` on a copy of the host's
// fail2ban config with files laid over it, and returns its output on failure.
func fail2banTest(t *testing.T, files map[string]string) (ok bool, out string) {
	t.Helper()
	if _, err := exec.LookPath("fail2ban-client"); err != nil {
		t.Skip("fail2ban-client not installed (scripts/install-deps.sh installs fail2ban)")
	}
	dir := filepath.Join(t.TempDir(), "conf")
	if b, err := exec.Command("cp", "-r", "/etc/fail2ban", dir).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, b)
	}
	for rel, text := range files {
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := exec.Command("fail2ban-client", "-c", dir, "--test").CombinedOutput()
	return err == nil, string(b)
}

func TestRenderGolden(t *testing.T) {
	cases := []struct {
		name string
		p    banner.JailParams
	}{
		{"jail-default.golden", banner.JailParams{Config: banner.DefaultConfig}},
		{"jail-whitelist.golden", banner.JailParams{
			Config:    banner.Config{MaxRetry: 3, FindTime: 120, BanTime: 86400},
			Whitelist: []string{"203.0.113.7", "198.51.100.0/24", "2001:db8::/48"},
		}},
		{"jail-files.golden", banner.JailParams{
			Config:  banner.DefaultConfig,
			Sources: banner.Sources{SSHDLogPath: "/dev/null", AuthLogPath: "/dev/null", Action: "dummy"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := banner.RenderJail(c.p)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, c.name, got)
			// Its own subtest: a missing fail2ban skips this check, and the
			// report still shows the golden comparison passed.
			t.Run("fail2ban-client --test", func(t *testing.T) {
				if ok, out := fail2banTest(t, map[string]string{
					"jail.d/tunnelsvc.local": got, "filter.d/tunnelsvc-auth.conf": banner.FilterText,
				}); !ok {
					t.Fatalf("fail2ban-client --test refused the golden file:\n%s", out)
				}
			})
		})
	}
	golden(t, "filter.golden", banner.FilterText)
}

// TestFilterMatchesDaemonLines runs fail2ban-regex over the daemon's real
// failure line and over lines that must not match (an attacker's text in a
// later field, other messages).
func TestFilterMatchesDaemonLines(t *testing.T) {
	if _, err := exec.LookPath("fail2ban-regex"); err != nil {
		t.Skip("fail2ban-regex not installed (scripts/install-deps.sh installs fail2ban)")
	}
	dir := t.TempDir()
	filter := filepath.Join(dir, "tunnelsvc-auth.conf")
	os.WriteFile(filter, []byte(banner.FilterText), 0o644)
	ts := time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00")
	lines := []string{
		`time=` + ts + ` level=WARN msg="auth failure from 203.0.113.9" kind=LOGIN_FAILED detail=""`,
		`time=` + ts + ` level=WARN msg="auth failure from 2001:db8::9" kind=LOGIN_RATE_LIMITED detail=""`,
		`time=` + ts + ` level=INFO msg="login" detail="msg=\"auth failure from 192.0.2.1\""`,
		`time=` + ts + ` level=WARN msg="auth failure from 192.0.2.2 extra"`,
		`time=` + ts + ` level=INFO msg="logged in" client=192.0.2.3`,
	}
	log := filepath.Join(dir, "log")
	os.WriteFile(log, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	out, err := exec.Command("fail2ban-regex", "--print-all-matched", log, filter).CombinedOutput()
	if err != nil {
		t.Fatalf("fail2ban-regex: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "5 lines, 0 ignored, 2 matched, 3 missed") {
		t.Fatalf("want exactly the two failure lines matched:\n%s", out)
	}
	for _, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		if strings.Contains(string(out), "| "+ip) {
			t.Errorf("%s matched", ip)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		c   banner.Config
		msg string
	}{
		{banner.Config{MaxRetry: 1, FindTime: 10, BanTime: 10}, ""},
		{banner.Config{MaxRetry: 0, FindTime: 10, BanTime: 10}, "max_retry must be between 1 and 1000"},
		{banner.Config{MaxRetry: 1, FindTime: 9, BanTime: 10}, "find_time must be between 10 and 315360000 seconds"},
		{banner.Config{MaxRetry: 1, FindTime: 10, BanTime: 9}, "ban_time must be between 10 and 315360000 seconds"},
		{banner.Config{MaxRetry: -5, FindTime: -1, BanTime: -1}, "max_retry must be between 1 and 1000"},
	}
	for _, c := range cases {
		err := c.c.Validate()
		if (err == nil) != (c.msg == "") || (err != nil && err.Error() != c.msg) {
			t.Errorf("%+v: err %v, want %q", c.c, err, c.msg)
		}
	}
}

func TestNormalizeEntry(t *testing.T) {
	cases := map[string]string{
		"203.0.113.7":        "203.0.113.7",
		"203.0.113.7/24":     "203.0.113.0/24",
		"203.0.113.7/32":     "203.0.113.7",
		"::ffff:203.0.113.7": "203.0.113.7",
		"2001:DB8::1":        "2001:db8::1",
		"2001:db8::1/48":     "2001:db8::/48",
		"":                   "ERR ip is required",
		"example.com":        "ERR invalid ip",
		"10.0.0.1/33":        "ERR invalid ip",
		"0.0.0.0/0":          "ERR 0.0.0.0/0 would whitelist every address",
		"fe80::1%eth0":       "ERR invalid ip",
		"1.2.3.4 5.6.7.8":    "ERR invalid ip",
	}
	for in, want := range cases {
		got, err := banner.NormalizeEntry(in)
		if strings.HasPrefix(want, "ERR ") {
			if err == nil || !strings.HasPrefix(err.Error(), strings.TrimPrefix(want, "ERR ")) {
				t.Errorf("%q: got %q, %v; want error %q", in, got, err, want)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%q: got %q, %v; want %q", in, got, err, want)
		}
	}
}

func openStore(t *testing.T) *store.Store {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestSetupWithoutSystemdChangesNothing(t *testing.T) {
	in := bannertest.New(t)
	o := in.Options()
	o.Store, o.Units = openStore(t), nil
	svc := banner.New(o)
	rec := testutil.NewProgress()
	svc.Setup(context.Background(), rec)
	if ok := rec.Wait(t); ok {
		t.Fatal("setup without systemd succeeded")
	}
	if !strings.Contains(rec.Text(), "error: ban tool setup failed: systemd is not available") {
		t.Fatalf("progress:\n%s", rec.Text())
	}
	if _, err := os.Stat(svc.JailPath()); err == nil {
		t.Fatal("jail file written without systemd")
	}
}

// TestRefusedConfigKeepsOldFile breaks the copied fail2ban config so that
// --test fails, and checks that the broken file is named (never quoted:
// it is not ours) and the managed file is untouched.
func TestRefusedConfigKeepsOldFile(t *testing.T) {
	in := bannertest.New(t)
	o := in.Options()
	o.Store = openStore(t)
	svc := banner.New(o)
	os.MkdirAll(filepath.Dir(svc.JailPath()), 0o755)
	const old = "# previous\n"
	os.WriteFile(svc.JailPath(), []byte(old), 0o644)
	os.WriteFile(filepath.Join(in.ConfDir, "jail.d", "broken.local"), []byte("[x\nfoo"), 0o644)

	err := svc.SetConfig(context.Background(), banner.Config{MaxRetry: 2, FindTime: 60, BanTime: 60})
	if err == nil || !strings.Contains(err.Error(), "fail2ban refused the configuration: ") ||
		strings.Contains(err.Error(), "[x") || strings.Contains(err.Error(), "\n") ||
		!strings.Contains(err.Error(), filepath.Join(in.ConfDir, "jail.d", "broken.local")+" line 1") {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(svc.JailPath()); string(b) != old {
		t.Fatalf("jail file changed to:\n%s", b)
	}
	if c, _ := svc.Config(context.Background()); c != banner.DefaultConfig {
		t.Fatalf("refused config was saved: %+v", c)
	}
	if in.Reloads() != 0 {
		t.Fatal("fail2ban was reloaded after a refused check")
	}
}

// TestRealServer drives a private fail2ban-server through the Service:
// setup, banning after max_retry daemon lines, whitelist, config reload.
func TestRealServer(t *testing.T) {
	in := bannertest.New(t)
	o := in.Options()
	o.Store = openStore(t)
	svc := banner.New(o)
	ctx := context.Background()
	if err := svc.SetConfig(ctx, banner.Config{MaxRetry: 3, FindTime: 600, BanTime: 600}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.AddWhitelist(ctx, "198.51.100.7"); err != nil {
		t.Fatal(err)
	}
	rec := testutil.NewProgress()
	go svc.Setup(ctx, rec)
	if !rec.Wait(t) {
		t.Fatalf("setup failed:\n%s", rec.Text())
	}
	for _, want := range []string{"fail2ban accepted the configuration", "wrote " + svc.JailPath(), "fail2ban is running with jails: sshd, tunnelsvc-auth", "ban tool set up"} {
		if !strings.Contains(rec.Text(), want) {
			t.Errorf("progress lacks %q:\n%s", want, rec.Text())
		}
	}
	if got := in.Get(banner.AuthJail, "maxretry"); got != "3" {
		t.Fatalf("maxretry = %s", got)
	}
	if got := in.Get(banner.AuthJail, "ignoreip"); !strings.Contains(got, "198.51.100.7") {
		t.Fatalf("ignoreip = %s", got)
	}

	// Whitelisted first: once the later address is banned, these lines
	// have been read too.
	in.AuthFailures("198.51.100.7", 5)
	in.AuthFailures("203.0.113.9", 2)
	if !bannertest.WaitFor(10*time.Second, func() bool {
		st, _ := svc.Status(ctx)
		for _, j := range st.Jails {
			if j.Name == banner.AuthJail && j.CurrentlyFailed == 1 {
				return true
			}
		}
		return false
	}) {
		t.Fatal("fail2ban did not count the failures")
	}
	if b := in.Banned(banner.AuthJail); len(b) != 0 {
		t.Fatalf("banned before max_retry: %v", b)
	}
	in.AuthFailures("203.0.113.9", 1)
	if !bannertest.WaitFor(10*time.Second, func() bool { return slices.Contains(in.Banned(banner.AuthJail), "203.0.113.9") }) {
		t.Fatalf("not banned after max_retry; banned = %v", in.Banned(banner.AuthJail))
	}
	if b := in.Banned(banner.AuthJail); slices.Contains(b, "198.51.100.7") {
		t.Fatalf("whitelisted address banned: %v", b)
	}
	st, err := svc.Status(ctx)
	if err != nil || !st.Installed || !st.Running || !st.Managed {
		t.Fatalf("status %+v %v", st, err)
	}
	var auth banner.Jail
	for _, j := range st.Jails {
		if j.Name == banner.AuthJail {
			auth = j
		}
	}
	if auth.CurrentlyBanned != 1 || !slices.Equal(auth.Banned, []string{"203.0.113.9"}) {
		t.Fatalf("auth jail status %+v", auth)
	}
	// fail2ban lists an address as banned before it runs the ban action
	// (actions.py: addBanTicket, then action.ban), so the dummy action's
	// line can come a little after the address shows in banip.
	testutil.Eventually(t, 10*time.Second, "the dummy action's ban line", func() error {
		if ban, _ := os.ReadFile(in.BanFile); !strings.Contains(string(ban), "+203.0.113.9") {
			return fmt.Errorf("no +203.0.113.9 in %q", ban)
		}
		return nil
	})

	if _, err := svc.Unban(ctx, banner.AuthJail, "203.0.113.9"); err != nil {
		t.Fatal(err)
	}
	if b := in.Banned(banner.AuthJail); len(b) != 0 {
		t.Fatalf("still banned after unban: %v", b)
	}
	if _, err := svc.Unban(ctx, banner.AuthJail, "203.0.113.9"); err == nil || err.Error() != "203.0.113.9 is not banned in tunnelsvc-auth" {
		t.Fatalf("second unban: %v", err)
	}
	if _, err := svc.Unban(ctx, "nojail", "203.0.113.9"); err == nil || err.Error() != "Sorry but the jail 'nojail' does not exist" {
		t.Fatalf("unknown jail: %v", err)
	}
	// The status is read from fail2ban's socket: its refusals come in
	// fail2ban's words there too.
	if _, err := banner.JailStatus(ctx, in.Socket, "nojail"); err == nil || err.Error() != "fail2ban status nojail: Sorry but the jail 'nojail' does not exist" {
		t.Fatalf("status of an unknown jail: %v", err)
	}

	before := in.Reloads()
	if err := svc.SetConfig(ctx, banner.Config{MaxRetry: 7, FindTime: 300, BanTime: 900}); err != nil {
		t.Fatal(err)
	}
	if in.Reloads() != before+1 {
		t.Fatal("config change did not reload fail2ban")
	}
	for what, want := range map[string]string{"maxretry": "7", "findtime": "300", "bantime": "900"} {
		if got := in.Get(banner.AuthJail, what); got != want {
			t.Errorf("%s = %s, want %s", what, got, want)
		}
		if got := in.Get(banner.SSHDJail, what); got != want {
			t.Errorf("sshd %s = %s, want %s", what, got, want)
		}
	}
	if _, err := svc.RemoveWhitelist(ctx, "198.51.100.7"); err != nil {
		t.Fatal(err)
	}
	if got := in.Get(banner.AuthJail, "ignoreip"); strings.Contains(got, "198.51.100.7") {
		t.Fatalf("ignoreip after removal = %s", got)
	}

	// Stopped, fail2ban is installed but not running, which is no error.
	if res := in.Client(ctx, "stop"); res.Err != nil {
		t.Fatalf("fail2ban-client stop: %s", res.Words())
	}
	testutil.Eventually(t, 10*time.Second, "the status of a stopped fail2ban", func() error {
		st, err := svc.Status(ctx)
		if err != nil || !st.Installed || st.Running || len(st.Jails) != 0 {
			return fmt.Errorf("status %+v, %v", st, err)
		}
		return nil
	})
}

// tools answers fail2ban-client --version and python3's import check as
// told; every other command succeeds silently.
type tools struct {
	fail2ban bool // fail2ban-client is on PATH
	journal  bool // python3 can import systemd.journal
}

func (f tools) Run(_ context.Context, name string, args ...string) cmdrun.Result {
	switch {
	case name == "fail2ban-client" && !f.fail2ban:
		return cmdrun.Result{Err: fmt.Errorf("%s: %w", name, cmdrun.ErrNotInstalled)}
	case name == "fail2ban-client" && slices.Contains(args, "--version"):
		return cmdrun.Result{Stdout: "Fail2Ban v1.0.2\n"}
	case name == "python3" && !f.journal:
		return cmdrun.Result{Stderr: "ModuleNotFoundError: No module named 'systemd'", Err: errors.New("exit status 1")}
	}
	return cmdrun.Result{}
}

// TestInstalledIsOneCheck: the status's "installed" and the set-up decide
// it the same way (fail2ban-client runs and the configuration directory
// has jail.conf), with the same words; an installed fail2ban without
// python3-systemd is reported by the status and warned about by the
// set-up.
func TestInstalledIsOneCheck(t *testing.T) {
	ctx := context.Background()
	conf := t.TempDir()
	noConf := "fail2ban is not installed under this daemon's system root: " + conf +
		" has no jail.conf (copy /etc/fail2ban there, or run without --system-root)"
	cases := []struct {
		name     string
		tools    tools
		jailConf bool
		// the status's installed, problem and missing packages, and what the
		// set-up's progress says
		installed bool
		problem   string
		missing   []string
		progress  string
	}{
		{"no fail2ban-client", tools{}, true, false, banner.NotInstalled, nil,
			"error: ban tool setup failed: " + banner.NotInstalled},
		{"fail2ban-client without its configuration", tools{fail2ban: true, journal: true}, false, false, noConf, nil,
			"error: ban tool setup failed: " + noConf},
		{"installed without python3-systemd", tools{fail2ban: true}, true, true, "", []string{"python3-systemd"},
			"info: found Fail2Ban v1.0.2\nwarn: python3-systemd is not installed: fail2ban cannot run the ban tool's jails, which read the systemd journal (fail2ban backend = systemd) (apt-get install python3-systemd)\nerror: ban tool setup failed: systemd is not available"},
		{"installed", tools{fail2ban: true, journal: true}, true, true, "", nil,
			"info: found Fail2Ban v1.0.2\nerror: ban tool setup failed: systemd is not available"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			os.Remove(filepath.Join(conf, "jail.conf"))
			if c.jailConf {
				os.WriteFile(filepath.Join(conf, "jail.conf"), []byte("[DEFAULT]\n"), 0o644)
			}
			svc := banner.New(banner.Options{Store: openStore(t), Run: c.tools, ConfDir: conf})
			st, err := svc.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var missing []string
			for _, m := range st.Missing {
				missing = append(missing, m.Package)
			}
			if st.Installed != c.installed || st.Problem != c.problem || !slices.Equal(missing, c.missing) {
				t.Fatalf("status: installed %v, problem %q, missing %v; want %v, %q, %v", st.Installed, st.Problem, missing, c.installed, c.problem, c.missing)
			}
			if installed, journal := svc.Parts(ctx); installed != c.installed || journal != (c.installed && c.missing == nil) {
				t.Fatalf("parts: installed %v, journal %v", installed, journal)
			}
			rec := testutil.NewProgress()
			svc.Setup(ctx, rec)
			if rec.Wait(t) {
				t.Fatal("setup without systemd succeeded")
			}
			// Past the install check, the set-up stops at the missing systemd.
			got := strings.TrimPrefix(rec.Text(), "info: setting up the ban tool (fail2ban)\n")
			if got, _, _ = strings.Cut(got, ": this daemon was started without systemd"); strings.TrimSpace(got) != c.progress {
				t.Fatalf("progress:\n%s\nwant:\n%s", got, c.progress)
			}
		})
	}
}
