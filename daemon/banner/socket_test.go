package banner

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSocketPath: the socket fail2ban-client would use, from fail2ban's
// own configuration files in their order; the option given wins; none
// without a configuration.
func TestSocketPath(t *testing.T) {
	dir := t.TempDir()
	s := New(Options{ConfDir: dir})
	if p := s.socketPath(); p != "" {
		t.Fatalf("no configuration: %q, want none", p)
	}
	write := func(name, text string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct{ file, text, want string }{
		{"fail2ban.conf", "[DEFAULT]\nloglevel = INFO\nsocket = /var/run/fail2ban/fail2ban.sock\n[Definition]\n", "/var/run/fail2ban/fail2ban.sock"},
		{"fail2ban.d/a.conf", "[Thread]\nsocket = /not/this\n", "/var/run/fail2ban/fail2ban.sock"},
		{"fail2ban.d/b.conf", "[Definition]\n socket =  /run/b.sock \n", "/run/b.sock"},
		{"fail2ban.local", "[Definition]\nsocket = /run/local.sock\n", "/run/local.sock"},
		{"fail2ban.d/z.local", "[DEFAULT]\nsocket = /run/z.sock\n", "/run/z.sock"},
	}
	for _, st := range steps {
		write(st.file, st.text)
		if p := s.socketPath(); p != st.want {
			t.Fatalf("after %s: %q, want %q", st.file, p, st.want)
		}
	}
	if p := New(Options{ConfDir: dir, Socket: "/tmp/given.sock"}).socketPath(); p != "/tmp/given.sock" {
		t.Fatalf("with Socket: %q", p)
	}
}

// TestPickledCommand: a command pickled as fail2ban-server reads it: the
// bytes of Python's pickle.dumps(["status", "sshd"], 2) without its memo
// entries (pickle.loads gives ['status', 'sshd'] for them).
func TestPickledCommand(t *testing.T) {
	want := "\x80\x02](X\x06\x00\x00\x00statusX\x04\x00\x00\x00sshde."
	if got := string(pickleStrings([]string{"status", "sshd"})); got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}
