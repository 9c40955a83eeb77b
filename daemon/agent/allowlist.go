package agent

import (
	"bytes"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/pelletier/go-toml/v2"
)

// CheckClientConfig refuses a client config that is not of the shape the
// daemon renders (frpconf.ClientConfig): every key must be on the list below
// and every value of the expected form. frpc runs with more rights than the
// user `tunnel` that hands the agent a config, and frpc's own checks (frpc
// verify) accept settings that read or write files anywhere (webServer.
// assetsDir, log.to, includes, proxy plugins, auth.tokenSource) or reach
// other hosts; none of those is ever rendered, so none is accepted. dir is
// frpc's config directory: the only place a file named in the config (the
// CA of the tunnel's TLS) may be. A refusal wraps ErrRefused.
func CheckClientConfig(config []byte, dir string) error {
	if !utf8.Valid(config) {
		return refused("the config is not UTF-8 text")
	}
	// frpc expands Go templates in its config file before parsing it, so a
	// string that reads harmless here could become any key there.
	if bytes.Contains(config, []byte("{{")) {
		return refused("the config contains a template (\"{{\"), which frpc would expand")
	}
	// frpc falls back to JSON and YAML when the text is not TOML; the
	// daemon only writes TOML.
	var doc map[string]any
	if err := toml.Unmarshal(config, &doc); err != nil {
		return refused("the config is not TOML (%v)", err)
	}
	return clientSchema(filepath.Clean(dir)).check("", doc)
}

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// rule checks the value at path.
type rule interface {
	check(path string, v any) error
}

// table allows exactly its keys (case matters: frpc matches keys without
// regard to case, so "WebServer" is another spelling that is refused too).
type table map[string]rule

func (t table) check(path string, v any) error {
	m, ok := v.(map[string]any)
	if !ok {
		return refused("%s must be a table", name(path))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// "type" first: it decides what the rest of a proxy means to frpc.
	sort.Slice(keys, func(i, j int) bool {
		if (keys[i] == "type") != (keys[j] == "type") {
			return keys[i] == "type"
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys {
		p := join(path, k)
		r, ok := t[k]
		if !ok {
			return refused("%s is not allowed here (the agent installs only the settings tunnelsvc writes)", p)
		}
		if err := r.check(p, m[k]); err != nil {
			return err
		}
	}
	return nil
}

var bareKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func join(path, key string) string {
	if !bareKey.MatchString(key) {
		key = fmt.Sprintf("%q", key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func name(path string) string {
	if path == "" {
		return "the config"
	}
	return path
}

// mapOf allows any key matching keys, each value checked by r, or by the
// rule of its own name in except.
type mapOf struct {
	keys   *regexp.Regexp
	r      rule
	except map[string]rule
}

func (m mapOf) check(path string, v any) error {
	t, ok := v.(map[string]any)
	if !ok {
		return refused("%s must be a table", path)
	}
	for k, val := range t {
		if !m.keys.MatchString(k) {
			return refused("%s: key %q is not allowed", path, k)
		}
		r := m.r
		if e, ok := m.except[k]; ok {
			r = e
		}
		if err := r.check(join(path, k), val); err != nil {
			return err
		}
	}
	return nil
}

// arrayOf allows a list whose every element passes r.
type arrayOf struct {
	r   rule
	max int
}

func (a arrayOf) check(path string, v any) error {
	l, ok := v.([]any)
	if !ok {
		return refused("%s must be a list", path)
	}
	if len(l) > a.max {
		return refused("%s has %d entries, more than %d", path, len(l), a.max)
	}
	for i, e := range l {
		if err := a.r.check(fmt.Sprintf("%s[%d]", path, i), e); err != nil {
			return err
		}
	}
	return nil
}

type boolean struct{}

func (boolean) check(path string, v any) error {
	if _, ok := v.(bool); !ok {
		return refused("%s must be true or false", path)
	}
	return nil
}

type integer struct{ lo, hi int64 }

func (r integer) check(path string, v any) error {
	n, ok := v.(int64)
	if !ok || n < r.lo || n > r.hi {
		return refused("%s must be a whole number from %d to %d", path, r.lo, r.hi)
	}
	return nil
}

var port = integer{1, 65535}

// str allows a single-line string matching re. No string the daemon writes
// spans lines: a line break inside a TOML string could carry a `[common]`
// line that makes frpc read the file as its legacy INI format instead.
type str struct {
	re   *regexp.Regexp
	what string
}

func (r str) check(path string, v any) error {
	s, ok := v.(string)
	if !ok {
		return refused("%s must be a string", path)
	}
	if len(s) > 1024 || strings.ContainsFunc(s, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		return refused("%s must be one line of at most 1024 characters", path)
	}
	if r.re != nil && !r.re.MatchString(s) {
		return refused("%s must be %s", path, r.what)
	}
	return nil
}

var (
	printable = str{}
	ident     = str{regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`), "1 to 64 letters, digits, '.', '_' or '-'"}
	hostname  = str{regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`), "a host name"}
)

// pemCerts allows PEM certificates, the one text the daemon writes over
// several lines (the tunnel CA, in metadatas.ca): their alphabet has no
// '[', so no line of it can be a section header of frpc's legacy format.
type pemCerts struct{}

var pemRe = regexp.MustCompile(`^\s*(-----BEGIN CERTIFICATE-----\r?\n([A-Za-z0-9+/=]{1,76}\r?\n)+-----END CERTIFICATE-----\s*)+$`)

func (pemCerts) check(path string, v any) error {
	s, ok := v.(string)
	if !ok || len(s) > 64<<10 || !pemRe.MatchString(s) {
		return refused("%s must be PEM certificates", path)
	}
	return nil
}

type oneOf []string

func (r oneOf) check(path string, v any) error {
	s, _ := v.(string)
	for _, ok := range r {
		if s == ok {
			return nil
		}
	}
	return refused("%s must be %s", path, strings.Join(quoteAll(r), " or "))
}

func quoteAll(l []string) []string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = fmt.Sprintf("%q", s)
	}
	return q
}

// host allows a host name or an IP address (where frps is).
type host struct{}

func (host) check(path string, v any) error {
	s, _ := v.(string)
	if _, err := netip.ParseAddr(s); err == nil {
		return nil
	}
	if len(s) > 253 {
		return refused("%s must be a host name or an IP address", path)
	}
	return hostname.check(path, v)
}

// loopback allows a loopback address: frpc only reaches this machine's own
// ports, and its admin API stays on this machine.
type loopback struct{}

func (loopback) check(path string, v any) error {
	s, _ := v.(string)
	if a, err := netip.ParseAddr(s); err == nil && a.IsLoopback() {
		return nil
	}
	return refused("%s must be a loopback address such as 127.0.0.1", path)
}

// fileIn allows an absolute path of a file inside dir, written plainly.
type fileIn string

func (dir fileIn) check(path string, v any) error {
	s, _ := v.(string)
	if err := printable.check(path, v); err != nil {
		return err
	}
	if !filepath.IsAbs(s) || filepath.Clean(s) != s || filepath.Dir(s) != string(dir) {
		return refused("%s must be a file directly in %s", path, dir)
	}
	return nil
}

// clientSchema is what frpconf.ClientConfig writes, plus the tunnel CA
// (metadatas.ca, and TLS files in frpc's directory: the config names itself
// as its trustedCaFile) and a few harmless log settings.
func clientSchema(dir string) table {
	return table{
		"serverAddr":    host{},
		"serverPort":    port,
		"user":          ident,
		"loginFailExit": boolean{},
		"metadatas": mapOf{regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`), printable,
			map[string]rule{"ca": pemCerts{}}},
		"auth": table{
			"method":           oneOf{"token"},
			"token":            printable,
			"additionalScopes": arrayOf{oneOf{"HeartBeats", "NewWorkConns"}, 2},
		},
		"transport": table{
			// tcp: straight to frps's port; wss: through the web proxy on
			// the HTTPS port (frpconf.TransportWSS). Both pin the CA below.
			"protocol": oneOf{"tcp", "wss"},
			// frp's wire protocol: v2 once the machine's frpc has it
			// (frpconf.WireV2Since); v1 is frpc's default.
			"wireProtocol":      oneOf{"v1", "v2"},
			"heartbeatInterval": integer{-1, 3600},
			"heartbeatTimeout":  integer{-1, 3600},
			// Rendered by the reconnect work (frpconf.TCPMuxKeepalive).
			"tcpMuxKeepaliveInterval": integer{1, 3600},
			"tls": table{
				"enable":        boolean{},
				"trustedCaFile": fileIn(dir),
				"certFile":      fileIn(dir),
				"keyFile":       fileIn(dir),
				"serverName":    hostname,
			},
		},
		"webServer": table{
			"addr":     loopback{},
			"port":     port,
			"user":     printable,
			"password": printable,
		},
		"log": table{
			"to":                oneOf{"console"},
			"level":             oneOf{"trace", "debug", "info", "warn", "error"},
			"maxDays":           integer{0, 3650},
			"disablePrintColor": boolean{},
		},
		"proxies": arrayOf{table{
			"name":       ident,
			"type":       oneOf{"tcp", "udp"},
			"localIP":    loopback{},
			"localPort":  port,
			"remotePort": port,
		}, 10000},
	}
}
