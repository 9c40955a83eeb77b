// Package config holds the daemon's typed configuration, read from flags with
// an environment variable behind each one.
package config

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// Config is everything the daemon is told at start.
type Config struct {
	// Listen is the dashboard address when not socket-activated.
	Listen string
	// DataDir holds the database, the secret key file and the setup code.
	DataDir string
	// SystemRoot prefixes every system path the daemon writes (/etc/..., etc.).
	SystemRoot string
	// BaseURL is how machines reach the dashboard; empty means "from the request".
	BaseURL string
	// LocalNets are the client addresses treated as on-the-box: setup needs no
	// setup code from them, and X-Forwarded-For is believed only from them.
	LocalNets []netip.Prefix
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// DNSServer (host:port) answers check-dns and resolve-ip; empty means
	// the system resolver.
	DNSServer string
	// EchoURLs are the public IP-echo services detect-ip asks, in order.
	EchoURLs []string
}

// Default returns the built-in defaults.
func Default() Config {
	return Config{
		Listen:     "127.0.0.1:7380",
		DataDir:    "/var/lib/tunnelsvc",
		SystemRoot: "/",
		LocalNets:  []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
		LogLevel:   "info",
	}
}

// Flag describes one option: its flag name, environment variable and help.
type Flag struct {
	Name, Env, Help string
}

// Flags lists every serve option, in the order the README documents them.
var Flags = []Flag{
	{"listen", "TUNNELSVC_LISTEN", "dashboard address when not socket-activated"},
	{"data-dir", "TUNNELSVC_DATA_DIR", "directory of the database, secret key and setup code"},
	{"system-root", "TUNNELSVC_SYSTEM_ROOT", "prefix for every system file the daemon writes"},
	{"base-url", "TUNNELSVC_BASE_URL", "public URL machines use to reach the dashboard (default: from each request)"},
	{"local-nets", "TUNNELSVC_LOCAL_NETS", "comma-separated CIDRs counted as local clients"},
	{"log-level", "TUNNELSVC_LOG_LEVEL", "debug, info, warn or error"},
	{"dns-server", "TUNNELSVC_DNS_SERVER", "DNS server (host:port) for check-dns and resolve-ip (default: the system resolver)"},
	{"ip-echo-urls", "TUNNELSVC_IP_ECHO_URLS", "comma-separated IP-echo URLs detect-ip asks, in order"},
}

// Register binds the options to fs. Environment variables set the defaults,
// so an explicit flag wins over the environment, which wins over the
// built-in default. Call Finish after fs.Parse.
func Register(fs *flag.FlagSet, c *Config) *string {
	env := func(name, def string) string {
		if v, ok := os.LookupEnv(name); ok {
			return v
		}
		return def
	}
	fs.StringVar(&c.Listen, "listen", env("TUNNELSVC_LISTEN", c.Listen), Flags[0].Help+" [$TUNNELSVC_LISTEN]")
	fs.StringVar(&c.DataDir, "data-dir", env("TUNNELSVC_DATA_DIR", c.DataDir), Flags[1].Help+" [$TUNNELSVC_DATA_DIR]")
	fs.StringVar(&c.SystemRoot, "system-root", env("TUNNELSVC_SYSTEM_ROOT", c.SystemRoot), Flags[2].Help+" [$TUNNELSVC_SYSTEM_ROOT]")
	fs.StringVar(&c.BaseURL, "base-url", env("TUNNELSVC_BASE_URL", c.BaseURL), Flags[3].Help+" [$TUNNELSVC_BASE_URL]")
	nets := make([]string, len(c.LocalNets))
	for i, p := range c.LocalNets {
		nets[i] = p.String()
	}
	localNets := new(string)
	fs.StringVar(localNets, "local-nets", env("TUNNELSVC_LOCAL_NETS", strings.Join(nets, ",")), Flags[4].Help+" [$TUNNELSVC_LOCAL_NETS]")
	fs.StringVar(&c.LogLevel, "log-level", env("TUNNELSVC_LOG_LEVEL", c.LogLevel), Flags[5].Help+" [$TUNNELSVC_LOG_LEVEL]")
	fs.StringVar(&c.DNSServer, "dns-server", env("TUNNELSVC_DNS_SERVER", c.DNSServer), Flags[6].Help+" [$TUNNELSVC_DNS_SERVER]")
	fs.Func("ip-echo-urls", Flags[7].Help+" [$TUNNELSVC_IP_ECHO_URLS]", func(v string) error {
		c.EchoURLs = splitList(v)
		return nil
	})
	if v, ok := os.LookupEnv("TUNNELSVC_IP_ECHO_URLS"); ok {
		c.EchoURLs = splitList(v)
	}
	return localNets
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Finish validates the parsed values and fills derived fields.
func (c *Config) Finish(localNets string) error {
	c.LocalNets = nil
	for _, s := range strings.Split(localNets, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return fmt.Errorf("--local-nets: %q is not a CIDR or address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		c.LocalNets = append(c.LocalNets, p.Masked())
	}
	if c.DataDir == "" {
		return fmt.Errorf("--data-dir must not be empty")
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return err
	}
	c.DataDir = abs
	if c.SystemRoot == "" {
		c.SystemRoot = "/"
	}
	if c.SystemRoot, err = filepath.Abs(c.SystemRoot); err != nil {
		return err
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	for _, u := range c.EchoURLs {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("--ip-echo-urls: %q is not an http(s) URL", u)
		}
	}
	if c.DNSServer != "" {
		if _, _, err := net.SplitHostPort(c.DNSServer); err != nil {
			return fmt.Errorf("--dns-server: want host:port, got %q", c.DNSServer)
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("--log-level must be debug, info, warn or error")
	}
	return nil
}

// SystemPath roots an absolute system path (such as /etc/revtunnel/server.toml)
// at SystemRoot.
func (c *Config) SystemPath(p string) string {
	return filepath.Join(c.SystemRoot, p)
}

// IsLocal reports whether addr is in LocalNets.
func (c *Config) IsLocal(addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, p := range c.LocalNets {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
