// Package frpconf renders the tunnel engine's configurations, frps's and
// frpc's TOML, from plain values. It runs nothing, so the API and the
// machines domain can use it without reaching the OS.
package frpconf

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
)

// Custom block markers (spec §4.4). What the operator writes between them in
// the deployed server.toml survives every regeneration.
const (
	CustomBegin = "# ===== BEGIN CUSTOM CONFIGURATION ====="
	CustomEnd   = "# ===== END CUSTOM CONFIGURATION ====="
)

// ProxyBindAddr is where frps binds every tunnel listener. frps has one
// such address for all proxies, and machines' SSH and agent ports and HTTP
// tunnels' back ends must never listen outside (the daemon reaches agents
// on 127.0.0.1), so it is loopback always and not a parameter: public tcp
// tunnels are published by package publish (DNAT), whatever bind_ip says.
const ProxyBindAddr = "127.0.0.1"

// PluginPath is the HTTP path frps posts plugin calls to.
const PluginPath = "/frp/plugin"

// Heartbeats: frpc pings every HeartbeatInterval seconds, frps drops a client
// whose pings stop being accepted for HeartbeatTimeout seconds. The plugin
// rejects pings of deleted machines, so this bounds how long a deleted
// machine's control connection can outlive it even if its frpc misbehaves.
const (
	HeartbeatInterval = 10
	HeartbeatTimeout  = 30
)

// Coming back after the VPS restarts: frpc notices a dead control
// connection when a keepalive on it goes unanswered (TCPMuxKeepalive seconds,
// plus yamux's 10 s write timeout; frp's default is 30), then logs in again
// with a backoff that frp caps at 20 s. (A machine that starts while the VPS
// is down has frpc exit; its unit restarts it every 5 s.) Together: a
// machine is back within about 30 s of the VPS answering again.
const TCPMuxKeepalive = 5

// ServerMuxKeepalive: frps pings each machine's multiplexed connection
// every ServerMuxKeepalive seconds and drops it when a ping goes unanswered
// for yamux's 10 s write timeout. That is how a machine whose network
// failed silently (no FIN, no reset) shows offline within about 12 s; the
// heartbeat timeout alone takes 20 to 30 s. A ping is a 12-byte frame.
const ServerMuxKeepalive = 2

// MetaToken is the frpc metadata key that carries the machine's secret.
const MetaToken = "token"

// MetaCA is the frpc metadata key that carries the tunnel CA (PEM). The
// config file is its own trustedCaFile: Go reads the PEM block out of the
// TOML around it. So the pin and the config that uses it are one file,
// installed in one atomic step by bootstrap.sh and by every agent (old
// agents included, which know nothing of CAs), and frps's plugin learns at
// each Login which CA a machine pins.
const MetaCA = "ca"

// DefaultClientConfigPath is where machines keep their frpc config.
const DefaultClientConfigPath = "/etc/revtunnel/client.toml"

// ServerParams are the settings the server config is rendered from.
type ServerParams struct {
	// BindPort is where frpc connects (all interfaces).
	BindPort int
	// PluginAddr is the daemon's loopback plugin listener (host:port).
	PluginAddr string
	// Ports is the range tunnel ports come from; frps refuses any other.
	Ports store.PortRange
	// CertFile and KeyFile are frps's certificate (issued by the daemon's
	// tunnel CA) and key, as paths frps reads. Required: without them frps
	// would serve a throwaway certificate no machine can verify.
	CertFile, KeyFile string
	// Dashboard, when set, turns on frps's dashboard API on loopback, which
	// the daemon's traffic collector reads (package monitor).
	Dashboard *Dashboard
}

// Dashboard is frps's webServer: its API reports each proxy's traffic and
// connections. Addr must be a loopback address.
type Dashboard struct {
	Addr           string
	Port           int
	User, Password string
}

// DashboardUser is the user name of frps's dashboard API.
const DashboardUser = "tunnelsvc"

type serverFile struct {
	BindAddr      string          `toml:"bindAddr"`
	BindPort      int             `toml:"bindPort"`
	ProxyBindAddr string          `toml:"proxyBindAddr"`
	AllowPorts    []portRange     `toml:"allowPorts,inline"`
	Transport     serverTransport `toml:"transport,inline"`
	HTTPPlugins   []httpPlugin    `toml:"httpPlugins,inline"`
	WebServer     *webServer      `toml:"webServer,inline,omitempty"`
}

type portRange struct {
	Start int `toml:"start"`
	End   int `toml:"end"`
}

type serverTransport struct {
	HeartbeatTimeout int       `toml:"heartbeatTimeout"`
	TLS              serverTLS `toml:"tls"`

	TCPMuxKeepaliveInterval int `toml:"tcpMuxKeepaliveInterval"`
}

type serverTLS struct {
	Force    bool   `toml:"force"`
	CertFile string `toml:"certFile"`
	KeyFile  string `toml:"keyFile"`
}

type httpPlugin struct {
	Name string   `toml:"name"`
	Addr string   `toml:"addr"`
	Path string   `toml:"path"`
	Ops  []string `toml:"ops"`
}

// PluginOps are the operations frps asks the daemon about.
//
// NewWorkConn is not among them: frps sends it the user and metadata of the
// control connection the work connection joins (the Login's, not anything
// the work connection itself presents), so the answer would only repeat
// what the Ping before it and the NewUserConn that takes the work connection
// already decide: whether that machine still exists. A work connection
// carries nothing until a user connection the plugin accepted takes it.
// Asking anyway cost one HTTP call to the daemon per connection opened
// through a tunnel (frps asks for a new work connection for each one).
var PluginOps = []string{"Login", "NewProxy", "CloseProxy", "Ping", "NewUserConn"}

// ServerConfig renders frps's TOML with custom placed inside the custom
// block (empty for the diagnostic view). Every table is written inline, so
// the file has only top-level keys and an operator's top-level keys in the
// custom block cannot fall into a generated table.
//
// Values are checked with their validators and written by the TOML
// encoder, which quotes and escapes strings. That is not enough for frp:
// it runs every config file through Go's text/template before parsing, so
// "{{ .Envs.X }}" inside a quoted string would still be expanded. The
// validators admit no brace, so no accepted value can reach a template.
func ServerConfig(p ServerParams, custom string) (string, error) {
	if p.BindPort < 1 || p.BindPort > 65535 {
		return "", fmt.Errorf("frps bind port %d is not a port", p.BindPort)
	}
	if err := validate.HostPort(p.PluginAddr); err != nil {
		return "", fmt.Errorf("plugin address %q: %w", p.PluginAddr, err)
	}
	if p.Ports.Lo < 1 || p.Ports.Hi > 65535 || p.Ports.Lo > p.Ports.Hi {
		return "", fmt.Errorf("tunnel port range %d-%d is not a port range", p.Ports.Lo, p.Ports.Hi)
	}
	if p.CertFile == "" || p.KeyFile == "" {
		return "", fmt.Errorf("no certificate for frps: machines pin the tunnel CA and would refuse frps's own")
	}
	f := serverFile{
		BindAddr:      "0.0.0.0",
		BindPort:      p.BindPort,
		ProxyBindAddr: ProxyBindAddr,
		AllowPorts:    []portRange{{Start: p.Ports.Lo, End: p.Ports.Hi}},
		Transport:     serverTransport{HeartbeatTimeout: HeartbeatTimeout, TLS: serverTLS{Force: true, CertFile: p.CertFile, KeyFile: p.KeyFile}},
		HTTPPlugins:   []httpPlugin{{Name: "tunnelsvc", Addr: p.PluginAddr, Path: PluginPath, Ops: PluginOps}},
	}
	if _, err := validate.IP(f.ProxyBindAddr); err != nil {
		return "", fmt.Errorf("frps proxy bind address %q: %w", f.ProxyBindAddr, err)
	}
	f.Transport.TCPMuxKeepaliveInterval = ServerMuxKeepalive
	if d := p.Dashboard; d != nil {
		ip, err := netip.ParseAddr(d.Addr)
		if err != nil || !ip.IsLoopback() || d.Port < 1 || d.Port > 65535 || d.Password == "" {
			return "", fmt.Errorf("frps dashboard %s:%d: it must listen on a loopback address with a password", d.Addr, d.Port)
		}
		f.WebServer = &webServer{Addr: d.Addr, Port: d.Port, User: d.User, Password: d.Password}
	}
	body, err := toml.Marshal(f)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("# Generated by tunnelsvc from its settings; edits outside the custom block are replaced.\n")
	b.WriteString("# Machines and tunnels are not listed here: the daemon authorizes them live through the plugin.\n")
	b.Write(body)
	b.WriteString("\n" + CustomBegin + "\n")
	if c := strings.Trim(custom, "\n"); c != "" {
		b.WriteString(c + "\n")
	}
	b.WriteString(CustomEnd + "\n")
	return b.String(), nil
}

// CustomBlock returns what lies between the markers of a deployed file, and
// whether the file has a well-formed block.
func CustomBlock(file string) (string, bool) {
	lines := strings.Split(file, "\n")
	begin, end := -1, -1
	for i, l := range lines {
		switch strings.TrimRight(l, "\r") {
		case CustomBegin:
			if begin < 0 {
				begin = i
			}
		case CustomEnd:
			if begin >= 0 && end < 0 {
				end = i
			}
		}
	}
	if begin < 0 || end < 0 {
		return "", false
	}
	return strings.Join(lines[begin+1:end], "\n"), true
}

// ClientParams are what one machine's frpc config is rendered from.
type ClientParams struct {
	ServerAddr string
	ServerPort int
	MachineID  int64
	Secret     string
	// SSHLocalPort is the machine's sshd port (22).
	SSHLocalPort   int
	TunnelPort     int
	AgentLocalPort int
	AgentPort      int
	// AdminPort is frpc's admin webServer port on the machine's loopback
	// (0: DefaultAdminPort); `frpc reload -c` reaches frpc through it.
	AdminPort int
	Tunnels   []store.Tunnel
	// Targets are the machine's parts in other tunnels (or its own) served
	// by several machines: one tcp proxy each, named TargetProxy.
	Targets []store.Target
	// CA is the tunnel CA certificate (PEM) frpc pins; required.
	CA string
	// ServerName is the name frpc requires in frps's certificate.
	ServerName string
	// ConfigPath is where the config is installed on the machine (empty:
	// DefaultClientConfigPath); it is also the trustedCaFile (see MetaCA).
	ConfigPath string
	// Transport is how frpc reaches frps: TransportTCP (""), straight to
	// its bind port, or TransportWSS, as a WebSocket over TLS through the
	// web proxy on the HTTPS port (ServerPort is then that port). Either
	// way frpc pins the tunnel CA and sends the same credential.
	Transport string
	// WireV2 asks for frp's wire protocol v2 (binary control frames,
	// negotiated binary UDP packets), which frpc has from WireV2Since: an
	// older frpc refuses the key, so the daemon asks only of a machine
	// whose agent reported a client that has it.
	WireV2 bool
}

// WireV2Since is the first frpc version the daemon asks for wire protocol
// v2: frp v0.71.0, the first with binary UDP packets. frps takes v1 and v2
// on one port (it tells them apart by their first bytes), so old and new
// clients share it.
const WireV2Since = "0.71.0"

// Transports of a machine's tunnel client.
const (
	TransportTCP = "tcp"
	TransportWSS = "wss"
)

// WebsocketPath is the path frpc's wss transport asks for (frp's
// FrpWebsocketPath); the web proxy sends it to the daemon's bridge.
const WebsocketPath = "/~!frp"

// DefaultAdminPort is frpc's admin webServer port on machines (frp's own default).
const DefaultAdminPort = 7400

// AdminUser is the user name of frpc's admin webServer.
const AdminUser = "tunnelsvc"

// AdminPassword is the password of a machine's frpc admin webServer, derived
// from the machine's secret so that other local users of the machine cannot
// drive frpc (the admin API can rewrite its config), while the config file
// alone (root-only) is all frpc reload needs.
func AdminPassword(secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("frpc-admin"))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// User is the frp user name of a machine; frps prefixes every proxy name
// with it ("m7.ssh"), which is how the plugin knows whose proxy it is.
func User(machineID int64) string { return "m" + strconv.FormatInt(machineID, 10) }

// Proxy names (without the user prefix).
const (
	ProxySSH   = "ssh"
	ProxyAgent = "agent"
)

// ProxyType is frp's proxy type for a tunnel kind: udp for udp tunnels,
// tcp for the others (an http tunnel is a tcp proxy that the web proxy
// forwards to).
func ProxyType(kind string) string {
	if kind == "udp" {
		return "udp"
	}
	return "tcp"
}

// TargetProxy is the proxy name of a tunnel's target on another machine.
func TargetProxy(targetID int64) string { return "target-" + strconv.FormatInt(targetID, 10) }

// TunnelProxy is the proxy name of a tunnel.
func TunnelProxy(tunnelID int64) string { return "tunnel-" + strconv.FormatInt(tunnelID, 10) }

type clientFile struct {
	ServerAddr string          `toml:"serverAddr"`
	ServerPort int             `toml:"serverPort"`
	User       string          `toml:"user"`
	Metadatas  clientMetas     `toml:"metadatas"`
	Transport  clientTransport `toml:"transport"`
	WebServer  webServer       `toml:"webServer"`
	Proxies    []proxy         `toml:"proxies"`
}

type clientMetas struct {
	Token string `toml:"token"`
	// Multi-line, so each PEM line starts a line of the file.
	CA string `toml:"ca,multiline"`
}

type webServer struct {
	Addr     string `toml:"addr"`
	Port     int    `toml:"port"`
	User     string `toml:"user"`
	Password string `toml:"password"`
}

type clientTransport struct {
	Protocol                string    `toml:"protocol,omitempty"`
	WireProtocol            string    `toml:"wireProtocol,omitempty"`
	TCPMuxKeepaliveInterval int       `toml:"tcpMuxKeepaliveInterval"`
	HeartbeatInterval       int       `toml:"heartbeatInterval"`
	HeartbeatTimeout        int       `toml:"heartbeatTimeout"`
	TLS                     clientTLS `toml:"tls"`
}

type clientTLS struct {
	Enable        bool   `toml:"enable"`
	TrustedCaFile string `toml:"trustedCaFile"`
	ServerName    string `toml:"serverName"`
}

type proxy struct {
	Name       string          `toml:"name"`
	Type       string          `toml:"type"`
	LocalIP    string          `toml:"localIP"`
	LocalPort  int             `toml:"localPort"`
	RemotePort int             `toml:"remotePort"`
	Transport  *proxyTransport `toml:"transport,omitempty"`
}

type proxyTransport struct {
	ProxyProtocolVersion string `toml:"proxyProtocolVersion"`
}

// proxyProtocol is a tunnel proxy's transport: frpc's PROXY protocol
// header, with the address frps took the connection from, for a tcp or
// udp tunnel that asks for one. An http tunnel's proxy has none: frps
// takes its connections from the web proxy, so the edge writes the header
// itself, with the visitor the web proxy saw (package visitorhop), and
// frpc carries it on as the connection's first bytes.
func proxyProtocol(t store.Tunnel) *proxyTransport {
	if t.ProxyProtocol == "" || t.Kind == "http" {
		return nil
	}
	return &proxyTransport{ProxyProtocolVersion: t.ProxyProtocol}
}

// check refuses a value that fails its validator (see ServerConfig on why
// the TOML encoder's escaping is not enough for frp).
func (p ClientParams) check() error {
	if _, err := validate.Host(p.ServerAddr); err != nil {
		return fmt.Errorf("server address %q: %w", p.ServerAddr, err)
	}
	if err := validate.Token(p.Secret); err != nil {
		return fmt.Errorf("machine %d secret: %w", p.MachineID, err)
	}
	if err := validate.Hostname(p.ServerName); err != nil {
		return fmt.Errorf("tunnel server name %q: %w", p.ServerName, err)
	}
	if p.Transport != "" && p.Transport != TransportTCP && p.Transport != TransportWSS {
		return fmt.Errorf("transport %q is neither %q nor %q", p.Transport, TransportTCP, TransportWSS)
	}
	// frpc expands Go templates in every string; the PEM never has one.
	if strings.Contains(p.CA, "{{") {
		return fmt.Errorf("the tunnel CA certificate holds a template")
	}
	type namedPort struct {
		what string
		n    int
	}
	ports := []namedPort{{"server port", p.ServerPort}, {"ssh port", p.SSHLocalPort}, {"tunnel port", p.TunnelPort},
		{"agent local port", p.AgentLocalPort}, {"agent port", p.AgentPort}}
	if p.AdminPort != 0 {
		ports = append(ports, namedPort{"admin port", p.AdminPort})
	}
	for _, t := range p.Tunnels {
		ports = append(ports, namedPort{fmt.Sprintf("tunnel %d local port", t.ID), t.LocalPort},
			namedPort{fmt.Sprintf("tunnel %d remote port", t.ID), t.RemotePort})
		if v := t.ProxyProtocol; v != "" && v != "v1" && v != "v2" || v == "v1" && t.Kind == "udp" {
			return fmt.Errorf("tunnel %d: PROXY protocol %q", t.ID, v)
		}
	}
	for _, t := range p.Targets {
		ports = append(ports, namedPort{fmt.Sprintf("target %d local port", t.ID), t.LocalPort},
			namedPort{fmt.Sprintf("target %d remote port", t.ID), t.RemotePort})
	}
	for _, pt := range ports {
		if err := validate.Port(pt.n); err != nil {
			return fmt.Errorf("%s: %w", pt.what, err)
		}
	}
	return nil
}

// wireProtocol is frpc's transport.wireProtocol: left out for v1 (frpc's
// default), which every frpc speaks.
func wireProtocol(v2 bool) string {
	if v2 {
		return "v2"
	}
	return ""
}

// protocol is frpc's transport.protocol for a transport: left out for the
// direct one (frpc's default, tcp), so configs rendered before transports
// existed are unchanged.
func protocol(transport string) string {
	if transport == TransportWSS {
		return TransportWSS
	}
	return ""
}

// ClientConfig renders a machine's frpc TOML: its own secret, the ssh and
// agent proxies, and one tcp proxy per tunnel that is not paused (a paused
// one is only named in a comment). HTTP tunnels are tcp proxies
// too: the web proxy forwards <subdomain>.<domain> to their remote port.
func ClientConfig(p ClientParams) (string, error) {
	if p.ServerAddr == "" {
		return "", fmt.Errorf("no server address to put in the client config")
	}
	if !strings.Contains(p.CA, "-----BEGIN CERTIFICATE-----") || p.ServerName == "" {
		return "", fmt.Errorf("no tunnel CA and server name to pin in the client config")
	}
	if err := p.check(); err != nil {
		return "", err
	}
	admin := p.AdminPort
	if admin == 0 {
		admin = DefaultAdminPort
	}
	path := p.ConfigPath
	if path == "" {
		path = DefaultClientConfigPath
	}
	f := clientFile{
		ServerAddr: p.ServerAddr,
		ServerPort: p.ServerPort,
		User:       User(p.MachineID),
		Metadatas:  clientMetas{Token: p.Secret, CA: strings.TrimSpace(p.CA) + "\n"},
		Transport: clientTransport{Protocol: protocol(p.Transport), WireProtocol: wireProtocol(p.WireV2), TCPMuxKeepaliveInterval: TCPMuxKeepalive, HeartbeatInterval: HeartbeatInterval, HeartbeatTimeout: HeartbeatTimeout * 3,
			TLS: clientTLS{Enable: true, TrustedCaFile: path, ServerName: p.ServerName}},
		WebServer: webServer{Addr: "127.0.0.1", Port: admin, User: AdminUser, Password: AdminPassword(p.Secret)},
		Proxies: []proxy{
			{Name: ProxySSH, Type: "tcp", LocalIP: "127.0.0.1", LocalPort: p.SSHLocalPort, RemotePort: p.TunnelPort},
			{Name: ProxyAgent, Type: "tcp", LocalIP: "127.0.0.1", LocalPort: p.AgentLocalPort, RemotePort: p.AgentPort},
		},
	}
	var paused []string
	for _, t := range p.Tunnels {
		if t.Paused {
			paused = append(paused, TunnelProxy(t.ID))
			continue
		}
		f.Proxies = append(f.Proxies, proxy{Name: TunnelProxy(t.ID), Type: ProxyType(t.Kind), LocalIP: "127.0.0.1", LocalPort: t.LocalPort, RemotePort: t.RemotePort,
			Transport: proxyProtocol(t)})
	}
	for _, t := range p.Targets {
		if t.Paused {
			paused = append(paused, TargetProxy(t.ID))
			continue
		}
		f.Proxies = append(f.Proxies, proxy{Name: TargetProxy(t.ID), Type: "tcp", LocalIP: "127.0.0.1", LocalPort: t.LocalPort, RemotePort: t.RemotePort})
	}
	var b bytes.Buffer
	b.WriteString("# Generated by tunnelsvc for this machine. The token below is this machine's own credential.\n")
	b.WriteString("# frpc sends it only to a server whose certificate chains to the CA below (this file is its own trustedCaFile).\n")
	if len(paused) > 0 {
		// Proxy names only: digits and a fixed prefix, nothing frpc's
		// template expansion or TOML could read.
		b.WriteString("# Paused in the dashboard, left out until resumed: " + strings.Join(paused, ", ") + "\n")
	}
	enc := toml.NewEncoder(&b)
	if err := enc.Encode(f); err != nil {
		return "", err
	}
	return b.String(), nil
}
