package cmdrun

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The secret every test hides in a file the tool is made to read.
const secretText = "s3cr3t-first-line abc\ns3cr3t-second-line\n"

func need(t *testing.T, tool, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		t.Skipf("%s not installed (scripts/install-deps.sh installs %s)", tool, pkg)
	}
}

func write(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// oneLine fails unless msg is one line that carries none of the secret and
// contains each of want.
func oneLine(t *testing.T, msg string, want ...string) {
	t.Helper()
	t.Logf("message: %s", msg)
	if strings.Contains(msg, "s3cr3t") || strings.Contains(msg, "\n") {
		t.Fatalf("the message quotes the other file or has several lines: %q", msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Fatalf("message %q does not contain %q", msg, w)
		}
	}
}

func TestCaddyMessage(t *testing.T) {
	need(t, "caddy", "caddy")
	dir := t.TempDir()
	secret := write(t, filepath.Join(dir, "secret.conf"), secretText)
	own := write(t, filepath.Join(dir, "Caddyfile"), "import "+secret+"\n")
	res := Exec{}.Run(context.Background(), "caddy", "validate", "--config", own, "--adapter", "caddyfile")
	if res.Err == nil {
		t.Fatal("caddy accepted a file that imports garbage")
	}
	if !strings.Contains(res.Stderr, "s3cr3t") {
		t.Fatalf("the test is void: caddy did not quote the imported file:\n%s", res.Stderr)
	}
	oneLine(t, Message("caddy", res, own), secret+" line 2")

	// An error in our own file keeps caddy's message line, without its
	// JSON log lines and hints.
	write(t, own, "example.com {\n\tbogus_directive x\n}\nbogus2\n")
	res = Exec{}.Run(context.Background(), "caddy", "validate", "--config", own, "--adapter", "caddyfile")
	msg := Message("caddy", res, own)
	oneLine(t, msg, own+":", "unrecognized directive")
	if strings.Contains(msg, "{") || strings.Contains(msg, "Did you mean") {
		t.Fatalf("the message keeps caddy's log or hint: %q", msg)
	}
}

func TestNftMessage(t *testing.T) {
	need(t, "nft", "nftables")
	dir := t.TempDir()
	secret := write(t, filepath.Join(dir, "secret.nft"), secretText)
	own := write(t, filepath.Join(dir, "rules.nft"), "table inet t {\n}\ninclude \""+secret+"\"\n")
	res := Exec{}.Run(context.Background(), "nft", "-c", "-f", own)
	if res.Err == nil || !strings.Contains(res.Stderr, "s3cr3t") {
		t.Fatalf("the test is void: nft did not refuse and quote the included file: %v\n%s", res.Err, res.Stderr)
	}
	oneLine(t, Message("nft", res, own), secret+" line 1")

	// nft repeats the offending line of our own file under a caret; only
	// the message line stays.
	write(t, own, "table inet t {\n\tchain c {\n\t\tip daddr fe80::1%lo tcp dport 22 accept\n\t}\n}\n")
	res = Exec{}.Run(context.Background(), "nft", "-c", "-f", own)
	msg := Message("nft", res, own)
	oneLine(t, msg, own+":3:", "Error: syntax error")
	if strings.Contains(msg, "dport") || strings.Contains(msg, "^") {
		t.Fatalf("the message keeps nft's quote of the source line: %q", msg)
	}
}

func TestFail2banMessage(t *testing.T) {
	need(t, "fail2ban-client", "fail2ban")
	conf := filepath.Join(t.TempDir(), "fail2ban")
	if out, err := exec.Command("cp", "-r", "/etc/fail2ban", conf).CombinedOutput(); err != nil {
		t.Fatalf("copy /etc/fail2ban: %v %s", err, out)
	}
	own := write(t, filepath.Join(conf, "jail.d", "ours.local"), "[sshd]\nenabled = true\nbackend = systemd\nignoreip = 127.0.0.1\ns3cr3t-first-line abc\n")
	res := Exec{}.Run(context.Background(), "fail2ban-client", "-c", conf, "--test")
	if res.Err == nil || !strings.Contains(res.Stderr+res.Stdout, "s3cr3t") {
		t.Fatalf("the test is void: fail2ban did not refuse and quote the line: %v\n%s%s", res.Err, res.Stderr, res.Stdout)
	}
	oneLine(t, Message("fail2ban", res, own), "Source contains parsing errors", own, "(line 5)")

	// An interpolation error quotes the raw value; that part is cut.
	write(t, own, "[sshd]\nenabled = true\nbackend = systemd\nignoreip = 127.0.0.1 %(s3cr3t)s\n")
	res = Exec{}.Run(context.Background(), "fail2ban-client", "-c", conf, "--test")
	if !strings.Contains(res.Stderr+res.Stdout, "Raw value") {
		t.Fatalf("the test is void: fail2ban printed no raw value:\n%s%s", res.Stderr, res.Stdout)
	}
	msg := Message("fail2ban", res, own)
	t.Logf("message: %s", msg)
	if strings.Contains(msg, "Raw value") || strings.Contains(msg, "127.0.0.1") || !strings.Contains(msg, "ignoreip") {
		t.Fatalf("message %q keeps the raw value or loses the option's name", msg)
	}
}

func TestFrpsMessage(t *testing.T) {
	frps, err := filepath.Abs("../../bin/frps")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(frps); err != nil {
		t.Skip("bin/frps is not built (make frp builds it)")
	}
	own := write(t, filepath.Join(t.TempDir(), "server.toml"), "bindPort = 7000\nxyz = 3\n")
	res := Exec{}.Run(context.Background(), frps, "verify", "-c", own)
	oneLine(t, Message("frps", res, own), "unknown field")
}

// Only the places where a tool names a file it read count as files: a URL
// or a path without a line number in a message is no reason to hide it.
func TestForeignFileNeedsALocation(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want string
	}{
		{"adapting config using caddyfile: /etc/x/secret:2: unrecognized directive: s3cr3t", "/etc/x/secret"},
		{"/etc/x/r.nft:3:19-19: Error: syntax error", "/etc/x/r.nft"},
		{"Source contains parsing errors: '/etc/fail2ban/jail.d/x.local' (line 5)", "/etc/fail2ban/jail.d/x.local"},
		{"File contains no section headers. (in /etc/fail2ban/jail.d/x.local:1)", "/etc/fail2ban/jail.d/x.local"},
		{"parsing upstream http://127.0.0.1:7380/x: bad", ""},
		{"loading certificate: open /etc/ssl/x.pem: no such file or directory", ""},
		{"adapting config using caddyfile: /own/Caddyfile:2: unrecognized directive: bogus", ""},
	} {
		p, _, ok := foreignFile(c.msg, []string{"/own/Caddyfile"})
		if p != c.want || ok != (c.want != "") {
			t.Errorf("foreignFile(%q) = %q, %v; want %q", c.msg, p, ok, c.want)
		}
	}
}
