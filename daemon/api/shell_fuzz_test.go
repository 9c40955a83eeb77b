package api

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
)

// shellSeeds are base URLs and tokens with everything the shell would
// interpret: quotes, $(), backticks, ;, newlines, globs, #, unicode.
var shellSeeds = [][2]string{
	{"http://vps.example.com:7380", "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcde"},
	{"https://[2001:db8::1]:8443", "tokentokentoken0"},
	{"http://127.0.0.1", "t0k3n-with_under_and-dash"},
	{"http://x';rm -rf /;'", "AAAAAAAAAAAAAAAAAAAA"},
	{"http://a$(reboot).com", "AAAAAAAAAAAAAAAAAAAA"},
	{"http://a`id`.com", "AAAAAAAAAAAAAAAAAAAA;id"},
	{"http://a.com\n#", "AAAAAAAAAAAAAAAA\nreboot"},
	{"http://[fe80::1%lo]", "AAAAAAAAAAAAAAAA'$(id)'"},
	{"http://*.com", "AAAAAAAAAAAAAAAA*"},
	{"http://例え.jp", "ÄAAAAAAAAAAAAAAAA"},
	{"http://a.com/{x}", "{{.Envs.HOME}}AAAAAAAA"},
}

// FuzzJoinCommand: for any base URL and token the API would put into
// shell text, real bash reads the join command as exactly the two commands
// we meant, with the URL and the token as single arguments, and reads the
// served bootstrap.sh's BASE_URL line as exactly the base URL.
func FuzzJoinCommand(f *testing.F) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		f.Skip("bash is not installed")
	}
	script, err := os.ReadFile("../../scripts/bootstrap.sh")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range shellSeeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, base, token string) {
		if validate.BaseURL(base) != nil || validate.Token(token) != nil {
			return
		}
		// Shell functions stand in for curl and bash and print the
		// arguments they were given, one per line.
		stub := `curl() { printf 'curl'; printf ' <%s>' "$@"; echo; }; bash() { printf 'bash'; printf ' <%s>' "$@"; echo; }; `
		out, err := exec.Command(bash, "-c", stub+quotedJoinCommand(base, token)).CombinedOutput()
		want := "curl <-fsSL> <" + base + "/static/bootstrap.sh> <-o> <bootstrap.sh>\nbash <bootstrap.sh> <" + token + ">\n"
		if err != nil || string(out) != want {
			t.Fatalf("bash read the join command %q as\n%s(err %v), want\n%s", quotedJoinCommand(base, token), out, err, want)
		}
		rendered := bootstrapScript(script, base)
		var line string
		for _, l := range strings.Split(rendered, "\n") {
			if strings.HasPrefix(l, "BASE_URL=") {
				line = l
				break
			}
		}
		out, err = exec.Command(bash, "-c", line+"\nprintf '%s' \"$BASE_URL\"").CombinedOutput()
		if err != nil || string(out) != base {
			t.Fatalf("bash read %q as BASE_URL=%q (err %v), want %q", line, out, err, base)
		}
		if out, err := exec.Command(bash, "-n", "-c", rendered).CombinedOutput(); err != nil {
			t.Fatalf("bash -n refuses bootstrap.sh for base %q: %s", base, out)
		}
	})
}

// A Host header that is no plain host cannot reach the join command or the
// served script: 400, and no token is issued.
func TestShellTextRefusesHostileHost(t *testing.T) {
	e := newMachinesEnv(t, wide)
	for _, host := range []string{"vps.example.com$(reboot)", "a';id;'", "x`id`", "[fe80::1%25lo]:7380"} {
		r := e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{}`, cookie: e.cookie, header: map[string]string{"Host": host}})
		if r.Code != 400 {
			t.Fatalf("Host %q: token request answered %d, want 400: %s", host, r.Code, r.Body)
		}
		if msg, _ := r.json(t)["error"].(string); !strings.Contains(msg, "--base-url") {
			t.Fatalf("Host %q: message %q does not say how to fix it", host, msg)
		}
	}
	if l := e.list(t, "/api/bootstrap/tokens"); len(l) != 0 {
		t.Fatalf("a refused request issued a token: %v", l)
	}
	// An IPv6 host needs quoting: brackets are a glob to the shell.
	d := e.data(t, e.do(req{method: "POST", path: "/api/bootstrap/tokens", body: `{}`, cookie: e.cookie,
		header: map[string]string{"Host": "[2001:db8::1]:7380"}}), 200)
	if want := "curl -fsSL 'http://[2001:db8::1]:7380/static/bootstrap.sh' -o bootstrap.sh && bash bootstrap.sh " + d["token"].(string); d["command"] != want {
		t.Fatalf("command = %q, want %q", d["command"], want)
	}
}

// A machine that reached the dashboard under a Host that is no hostname
// gets a clear 400 and its token stays valid: the address would have gone
// into its frpc config.
func TestBootstrapRefusesHostileServerAddress(t *testing.T) {
	e := newMachinesEnv(t, wide)
	tok := e.token(t)
	body := `{"token":"` + tok + `","name":"pi","username":"pi"}`
	r := e.do(req{method: "POST", path: "/api/bootstrap", body: body, peer: "198.51.100.7:5000", header: map[string]string{"Host": "vps$(id).example.com"}})
	if r.Code != 400 {
		t.Fatalf("bootstrap under a hostile Host: %d %s", r.Code, r.Body)
	}
	if msg, _ := r.json(t)["error"].(string); !strings.Contains(msg, "--server-host") {
		t.Fatalf("message %q does not say how to fix it", msg)
	}
	if r := e.bootstrap(t, tok, "pi"); r.Code != 200 {
		t.Fatalf("the token was spent by the refused bootstrap: %d %s", r.Code, r.Body)
	}
}
