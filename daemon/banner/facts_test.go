package banner_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/banner"
)

// TestInstallFactsAreAskedOnceAndAgainAfterAChange: with the real runner,
// fail2ban-client --version and python3's import check run once while the
// programs and the imported module stay the same files, and again when
// one is replaced (an upgrade) or the module is gone; a missing part is
// asked every time, so installing it shows at once.
func TestInstallFactsAreAskedOnceAndAgainAfterAChange(t *testing.T) {
	bin, conf := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(conf, "jail.conf"), []byte("[DEFAULT]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(bin, "calls")
	module := filepath.Join(bin, "journal.py")
	write := func(name, script string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("fail2ban-client", `echo "fail2ban-client $*" >>`+calls+"\necho 'Fail2Ban v1.0.2'\n")
	// python3 imports systemd.journal only while the module file exists.
	write("python3", `echo python3 >>`+calls+"\n[ -f "+module+" ] || { echo \"ModuleNotFoundError: No module named 'systemd'\" >&2; exit 1; }\necho "+module+"\n")
	t.Setenv("PATH", bin) // the scripts need only sh and its builtins
	svc := banner.New(banner.Options{Store: openStore(t), ConfDir: conf})
	ctx := context.Background()
	ask := func(wantInstalled, wantJournal bool, want string) {
		t.Helper()
		_ = os.Remove(calls)
		installed, journal := svc.Parts(ctx)
		got, _ := os.ReadFile(calls)
		if installed != wantInstalled || journal != wantJournal || strings.TrimSpace(string(got)) != want {
			t.Fatalf("installed %v, journal %v, ran %q; want %v, %v, %q", installed, journal, got, wantInstalled, wantJournal, want)
		}
	}
	ask(true, false, "fail2ban-client --version\npython3")
	ask(true, false, "python3") // missing: asked again
	if err := os.WriteFile(module, []byte("# systemd.journal\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ask(true, true, "python3")
	ask(true, true, "")
	in, err := svc.Installed(ctx)
	if err != nil || !in.Installed || in.Version != "Fail2Ban v1.0.2" {
		t.Fatalf("Installed = %+v, %v", in, err)
	}
	// An upgrade replaces fail2ban-client: its version is asked again.
	write("fail2ban-client", `echo "fail2ban-client $*" >>`+calls+"\necho 'Fail2Ban v1.1.0'\n")
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(bin, "fail2ban-client"), later, later); err != nil {
		t.Fatal(err)
	}
	ask(true, true, "fail2ban-client --version")
	if in, _ := svc.Installed(ctx); in.Version != "Fail2Ban v1.1.0" {
		t.Fatalf("version after the upgrade = %q", in.Version)
	}
	// The module removed: the journal check fails again.
	if err := os.Remove(module); err != nil {
		t.Fatal(err)
	}
	ask(true, false, "python3")
	// fail2ban-client removed: not installed, and asked every time.
	if err := os.Remove(filepath.Join(bin, "fail2ban-client")); err != nil {
		t.Fatal(err)
	}
	ask(false, false, "")
	if in, _ := svc.Installed(ctx); in.Installed || in.Problem != banner.NotInstalled {
		t.Fatalf("Installed without fail2ban-client = %+v", in)
	}
}
