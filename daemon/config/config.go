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
	"strconv"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/edgename"
	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
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

	// ServerHost is the address machines dial frps at; empty means the host
	// they reached the dashboard by.
	ServerHost string
	// FRPSPort is frps's bindPort.
	FRPSPort int
	// PluginListen is the loopback address of the frps plugin listener.
	PluginListen string
	// FRPSDashboardListen is the loopback address of frps's dashboard API,
	// which the traffic collector reads.
	FRPSDashboardListen string
	// TunnelPortLo and TunnelPortHi bound the ports machines and tunnels get.
	TunnelPortLo, TunnelPortHi int
	// BinDir holds frps and frpc.
	BinDir string
	// StaticDir holds the binaries machines download (agents/, revtunnel/).
	StaticDir string
	// RetentionDays is how long audit, activity and stale-token rows are
	// kept (each table also keeps at most 100,000 rows).
	RetentionDays int
	// GateListen is the loopback address where the web proxy asks the
	// access gate of HTTP tunnels (forward_auth).
	GateListen string
	// LocalSocket is the Unix socket where root on this edge reaches the
	// API without a token (tunnelsvc export and apply) when it is not
	// socket-activated (default: api.sock in DataDir).
	LocalSocket string

	// Database is the PostgreSQL URL; empty means SQLite in DataDir. It may
	// hold a password: show it only through RedactDatabaseURL.
	Database string

	// EdgeName names this VPS among the edges of a cluster that share one
	// database (default: the host name).
	EdgeName string

	// Version is the daemon's version (set by main, not a flag); /metrics
	// shows it in tunnelsvc_build_info.
	Version string

	frpsPort, tunnelPorts, retentionDays string
	// credentialErr is a database credential that could not be read.
	credentialErr error
}

// Default returns the built-in defaults.
func Default() Config {
	return Config{
		Listen:     "127.0.0.1:7380",
		DataDir:    "/var/lib/tunnelsvc",
		SystemRoot: "/",
		LocalNets:  []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
		LogLevel:   "info",

		FRPSPort: 7000, PluginListen: "127.0.0.1:7381", FRPSDashboardListen: "127.0.0.1:7383", TunnelPortLo: 20000, TunnelPortHi: 29999,
		BinDir: "/usr/lib/tunnelsvc", StaticDir: "/usr/lib/tunnelsvc/static",
		frpsPort: "7000", tunnelPorts: "20000-29999",
		RetentionDays: 90, retentionDays: "90",
		GateListen: "127.0.0.1:7382",
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
	{"base-url", "TUNNELSVC_BASE_URL", "public URL machines use to reach the dashboard (default: https://router.<domain> once the web proxy is installed, see docs/machines.md)"},
	{"local-nets", "TUNNELSVC_LOCAL_NETS", "comma-separated CIDRs counted as local clients"},
	{"log-level", "TUNNELSVC_LOG_LEVEL", "debug, info, warn or error"},
	{"dns-server", "TUNNELSVC_DNS_SERVER", "DNS server (host:port) for check-dns and resolve-ip (default: the system resolver)"},
	{"ip-echo-urls", "TUNNELSVC_IP_ECHO_URLS", "comma-separated IP-echo URLs detect-ip asks, in order (default: three public echo services)"},
	{"server-host", "TUNNELSVC_SERVER_HOST", "address machines dial the tunnel server at (default: the server host given at installation, else router.<domain>, see docs/machines.md)"},
	{"frps-port", "TUNNELSVC_FRPS_PORT", "port the tunnel server (frps) listens on for machines"},
	{"frps-plugin-listen", "TUNNELSVC_FRPS_PLUGIN_LISTEN", "loopback address where the daemon answers frps's plugin calls"},
	{"tunnel-ports", "TUNNELSVC_TUNNEL_PORTS", "range LO-HI of ports given to machines and tunnels"},
	{"bin-dir", "TUNNELSVC_BIN_DIR", "directory holding frps and frpc"},
	{"static-dir", "TUNNELSVC_STATIC_DIR", "directory of the binaries machines download under /static (agents/, revtunnel/; `make build` fills bin/static)"},
	{"retention-days", "TUNNELSVC_RETENTION_DAYS", "days the audit log, activity feed and stale-token attempts are kept"},
	{"gate-listen", "TUNNELSVC_GATE_LISTEN", "loopback address where the web proxy asks the access gate of HTTP tunnels"},
	{"frps-dashboard-listen", "TUNNELSVC_FRPS_DASHBOARD_LISTEN", "loopback address of frps's dashboard API, which the daemon polls for tunnel traffic"},
	{"edge-name", "TUNNELSVC_EDGE_NAME", "this VPS's name among the edges that share one database (default: the host name); see docs/edges.md"},
	{"local-socket", "TUNNELSVC_LOCAL_SOCKET", "Unix socket where root on this edge calls the API without a token, when not socket-activated (default: api.sock in --data-dir; the package's tunnelsvc-local.socket holds /run/tunnelsvc/api.sock)"},
	{"database", DatabaseEnv, "PostgreSQL URL (postgres://USER@HOST/DB?sslmode=verify-full); empty: SQLite in --data-dir. Under systemd a non-empty credential `database-url` (/etc/tunnelsvc/database-url) takes the place of the variable; see docs/database.md"},
}

// Register binds the options to fs. Environment variables set the defaults,
// so an explicit flag wins over the environment, which wins over the
// built-in default. Call Finish after fs.Parse.
func Register(fs *flag.FlagSet, c *Config) *string {
	return register(fs, c, c.lookupEnv)
}

// register is Register with the environment given as lookup, so that the
// reference page can show the built-in defaults whatever the environment.
func register(fs *flag.FlagSet, c *Config, lookup func(string) (string, bool)) *string {
	env := func(name, def string) string {
		if v, ok := lookup(name); ok {
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
	if v, ok := lookup("TUNNELSVC_IP_ECHO_URLS"); ok {
		c.EchoURLs = splitList(v)
	}
	fs.StringVar(&c.ServerHost, "server-host", env("TUNNELSVC_SERVER_HOST", c.ServerHost), Flags[8].Help+" [$TUNNELSVC_SERVER_HOST]")
	fs.StringVar(&c.frpsPort, "frps-port", env("TUNNELSVC_FRPS_PORT", c.frpsPort), Flags[9].Help+" [$TUNNELSVC_FRPS_PORT]")
	fs.StringVar(&c.PluginListen, "frps-plugin-listen", env("TUNNELSVC_FRPS_PLUGIN_LISTEN", c.PluginListen), Flags[10].Help+" [$TUNNELSVC_FRPS_PLUGIN_LISTEN]")
	fs.StringVar(&c.tunnelPorts, "tunnel-ports", env("TUNNELSVC_TUNNEL_PORTS", c.tunnelPorts), Flags[11].Help+" [$TUNNELSVC_TUNNEL_PORTS]")
	fs.StringVar(&c.BinDir, "bin-dir", env("TUNNELSVC_BIN_DIR", c.BinDir), Flags[12].Help+" [$TUNNELSVC_BIN_DIR]")
	fs.StringVar(&c.StaticDir, "static-dir", env("TUNNELSVC_STATIC_DIR", c.StaticDir), Flags[13].Help+" [$TUNNELSVC_STATIC_DIR]")
	fs.StringVar(&c.retentionDays, "retention-days", env("TUNNELSVC_RETENTION_DAYS", c.retentionDays), Flags[14].Help+" [$TUNNELSVC_RETENTION_DAYS]")
	gate := flagByName("gate-listen")
	fs.StringVar(&c.GateListen, gate.Name, env(gate.Env, c.GateListen), gate.Help+" [$"+gate.Env+"]")
	fd := flagByName("frps-dashboard-listen")
	fs.StringVar(&c.FRPSDashboardListen, fd.Name, env(fd.Env, c.FRPSDashboardListen), fd.Help+" [$"+fd.Env+"]")
	ls := flagByName("local-socket")
	fs.StringVar(&c.LocalSocket, ls.Name, env(ls.Env, c.LocalSocket), ls.Help+" [$"+ls.Env+"]")
	en := flagByName("edge-name")
	fs.StringVar(&c.EdgeName, en.Name, env(en.Env, c.EdgeName), en.Help+" [$"+en.Env+"]")
	// A Func flag: its default (which may hold a password) is never
	// printed by -h.
	db := flagByName("database")
	c.Database = env(db.Env, c.Database)
	fs.Func(db.Name, db.Help+" [$"+db.Env+"]", func(v string) error {
		c.Database = strings.TrimSpace(v)
		return nil
	})
	return localNets
}

func flagByName(name string) Flag {
	for _, f := range Flags {
		if f.Name == name {
			return f
		}
	}
	panic("config: no flag " + name)
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
		e, err := validate.IPOrPrefix(s)
		if err != nil {
			return fmt.Errorf("--local-nets: %q is not a CIDR or address (%v)", s, err)
		}
		p, err := netip.ParsePrefix(e)
		if err != nil {
			a := netip.MustParseAddr(e)
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
	if c.LocalSocket == "" {
		c.LocalSocket = filepath.Join(c.DataDir, "api.sock")
	}
	if c.SystemRoot == "" {
		c.SystemRoot = "/"
	}
	if c.SystemRoot, err = filepath.Abs(c.SystemRoot); err != nil {
		return err
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	// Both end up in shell text and frpc configs (validate).
	if c.BaseURL != "" {
		if err := validate.BaseURL(c.BaseURL); err != nil {
			return fmt.Errorf("--base-url: %q: %v", c.BaseURL, err)
		}
	}
	if c.EdgeName == "" {
		c.EdgeName = DefaultEdgeName()
	}
	if err := CheckEdgeName(c.EdgeName); err != nil {
		return fmt.Errorf("--edge-name: %v", err)
	}
	if c.ServerHost != "" {
		h, err := validate.Host(c.ServerHost)
		if err != nil {
			return fmt.Errorf("--server-host: %q: %v", c.ServerHost, err)
		}
		c.ServerHost = h
	}
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
	days, err := strconv.Atoi(strings.TrimSpace(c.retentionDays))
	if err != nil || days < 1 || days > 36500 {
		return fmt.Errorf("--retention-days: %q is not a number of days from 1 to 36500", c.retentionDays)
	}
	c.RetentionDays = days
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("--log-level must be debug, info, warn or error")
	}
	if c.credentialErr != nil {
		return c.credentialErr
	}
	c.Database = strings.TrimSpace(c.Database)
	if err := checkDatabase(c.Database); err != nil {
		return err
	}
	return c.finishTunnels()
}

func (c *Config) finishTunnels() error {
	port, err := strconv.Atoi(strings.TrimSpace(c.frpsPort))
	if err != nil || port < 1 || port > 65535 {
		return fmt.Errorf("--frps-port: %q is not a port", c.frpsPort)
	}
	c.FRPSPort = port
	lo, hi, ok := strings.Cut(strings.TrimSpace(c.tunnelPorts), "-")
	l, errL := strconv.Atoi(strings.TrimSpace(lo))
	h, errH := strconv.Atoi(strings.TrimSpace(hi))
	if !ok || errL != nil || errH != nil || l < 1 || h > 65535 || l > h {
		return fmt.Errorf("--tunnel-ports: %q is not a range LO-HI of ports", c.tunnelPorts)
	}
	if port >= l && port <= h {
		return fmt.Errorf("--frps-port %d lies inside --tunnel-ports %s", port, c.tunnelPorts)
	}
	c.TunnelPortLo, c.TunnelPortHi = l, h
	ap, err := netip.ParseAddrPort(c.PluginListen)
	if err != nil || !ap.Addr().IsLoopback() {
		return fmt.Errorf("--frps-plugin-listen: %q must be a loopback address:port", c.PluginListen)
	}
	if gp, err := netip.ParseAddrPort(c.GateListen); err != nil || !gp.Addr().IsLoopback() {
		return fmt.Errorf("--gate-listen: %q must be a loopback address:port", c.GateListen)
	}
	if ap, err := netip.ParseAddrPort(c.FRPSDashboardListen); err != nil || !ap.Addr().IsLoopback() || ap.Port() == 0 {
		return fmt.Errorf("--frps-dashboard-listen: %q must be a loopback address:port", c.FRPSDashboardListen)
	}
	if c.BinDir, err = filepath.Abs(c.BinDir); err != nil {
		return err
	}
	if c.StaticDir, err = filepath.Abs(c.StaticDir); err != nil {
		return err
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

// DefaultEdgeName is the host's name, lower case, cut to its first label
// ("edge" when the host has none that is a valid edge name).
func DefaultEdgeName() string {
	h, err := os.Hostname()
	if err != nil {
		return "edge"
	}
	h, _, _ = strings.Cut(strings.ToLower(h), ".")
	if CheckEdgeName(h) != nil {
		return "edge"
	}
	return h
}

// CheckEdgeName accepts 1 to 32 lower-case letters, digits and inner
// hyphens: an edge's name goes into unit names on every machine
// (revtunnel-client@<edge>.service) and file names
// (/etc/revtunnel/client-<edge>.toml).
func CheckEdgeName(n string) error { return edgename.Check(n) }

// Parse parses a command's flags (the shared ones, from args) into a
// finished Config; name names the command in errors.
func Parse(name string, args []string) (*Config, error) {
	cfg := Default()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	nets := Register(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%s: unexpected argument %q", name, fs.Arg(0))
	}
	return &cfg, cfg.Finish(*nets)
}
