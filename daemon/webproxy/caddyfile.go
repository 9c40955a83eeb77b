// Package webproxy renders the web proxy's (Caddy's) configuration from the
// stored settings and tunnels, checks it with the real `caddy validate`,
// deploys it atomically and reloads caddy.service through the unit layer.
package webproxy

import (
	"bytes"
	"fmt"
	"html"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/template"
	"unicode/utf8"

	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
	"github.com/tunnelsvc/tunnelsvc/daemon/visitorhop"
)

// The custom-block markers (spec §4.4). What the operator writes between
// them in the deployed file survives every regeneration.
const (
	BeginCustom = "# ===== BEGIN CUSTOM CONFIGURATION ====="
	EndCustom   = "# ===== END CUSTOM CONFIGURATION ====="
)

// HTTPTunnel is one published web service: <Subdomain>.<domain> proxied to
// the tunnel's port on loopback, and to its other targets' ports (More).
type HTTPTunnel struct {
	Subdomain string
	Port      int
	// More are the ports of the other machines serving the same site, in
	// order; Balance ("failover", the default, or "round_robin") picks
	// among Port and them.
	More    []int
	Balance string
	// Health, when its Path is set, is Caddy's active health check of
	// every target.
	Health Health
	// Domains are the tunnel's own names, served (and certified) besides
	// <Subdomain>.<domain>.
	Domains []string
	// ProxyProtocol ("v1" or "v2"): the service gets the visitor's address
	// in a PROXY protocol header, which the daemon's hop writes (package
	// visitorhop): Caddy sends the requests to the hop, on the same ports
	// at visitorhop.Addr, with the visitor it saw.
	ProxyProtocol string
	// Fallback, when set, is the message of the page the site answers
	// (503, Retry-After) while no machine serving it answers, instead of
	// Caddy's bare 502.
	Fallback string
}

// Health is an active health check: GET Path with the site's Host every
// IntervalS seconds; a target is healthy when it answers ExpectStatus
// (0: any 2xx).
type Health struct {
	Path         string
	IntervalS    int
	ExpectStatus int
}

// FailDuration is how long Caddy passes over a target after a request
// to it failed (connection refused or closed: the machine or its service
// is down), before its active health check, if any, says so.
const FailDuration = "10s"

// TryDuration bounds how long Caddy keeps trying other targets for one
// request (GET and HEAD, and any request whose connection failed).
const TryDuration = "5s"

// TryInterval is how long Caddy waits before trying the next target after
// one failed (its default, 250 ms, was most of the time a visitor waited
// when a machine went away).
const TryInterval = "50ms"

// FallbackTryDuration is TryDuration for a site with a fallback page: when
// every machine is down, the visitor waits this long for one to come back
// before the page, instead of TryDuration. A machine that goes away is
// passed over at once either way (its port on frps refuses at once).
const FallbackTryDuration = "1s"

// Input is everything the Caddyfile is made from.
type Input struct {
	// Domain: the dashboard is served at router.<Domain>, tunnels at <sub>.<Domain>.
	Domain string
	// Dashboard is the daemon's own address (host:port) on loopback.
	Dashboard string
	Tunnels   []HTTPTunnel
	// Paused are the subdomains of paused http tunnels: they get no site
	// (the proxy serves nothing for them) and are only named in a comment.
	Paused []string
	// BindIP, when set, is the only address Caddy listens on (default_bind).
	BindIP string
	// Custom is the operator's block, kept verbatim.
	Custom string
	// PlainHTTPPort, when non-zero, serves every site over plain HTTP on that
	// port with automatic HTTPS off (a TLS terminator in front; tests).
	PlainHTTPPort int
	// Import, when set, is a Caddyfile imported whole (the caddy package's
	// /etc/caddy/Caddyfile), so the operator's own sites stay served once
	// caddy serves ours. Its sites must not repeat ours, and it must have no
	// global options block of its own (caddy validate says so if it does).
	Import string
	// Admin is Caddy's admin endpoint; empty keeps Caddy's default
	// (localhost:2019, which `caddy reload` uses), "off" disables it.
	Admin string
	// ACMECA is the ACME directory URL certificates come from (acme_ca);
	// empty leaves it to Caddy (the set-up always names one, Let's Encrypt
	// unless the operator chose another). ACMECARoot is a PEM file
	// of the root that CA's directory is served under (acme_ca_root), for
	// private ACME CAs. The set-up validates both before they get here.
	ACMECA, ACMECARoot string
	// HTTPPort and HTTPSPort, when non-zero, replace 80 and 443 with
	// automatic HTTPS still on (tests run a real ACME exchange on loopback).
	HTTPPort, HTTPSPort int
	// Gate, when set, is the daemon's loopback access-gate listener
	// (host:port) that every tunnel's site asks before each request, public
	// ones included, so that a change of access needs no Caddy reload.
	// Required when Gates is not empty.
	Gate string
	// Gates gives the gate mode of tunnels by subdomain (see GateMode).
	Gates map[string]GateMode
	// RelayACME: this edge is one of several (DNS may send the ACME CA's
	// validation request for a name another edge ordered to this one).
	// Caddy answers the challenges it ordered itself before any route;
	// the others go to the gate, which asks the other edges (one hop).
	// Only HTTP-01 is used then. Requires Gate.
	RelayACME bool
	// WSS, when set, serves frp's wss transport on the HTTPS port, for
	// machines whose network lets only 443 out: the site of the name they
	// pin (tunnelca.ServerName) presents the tunnel CA's certificate in
	// these files and sends frpconf.WebsocketPath to the gate listener,
	// where the daemon bridges it to frps. Requires Gate and automatic
	// HTTPS (not PlainHTTPPort).
	WSS *WSSSite
}

// WSSSite is the wss transport's site: its name, and the certificate and
// key Caddy presents for it.
type WSSSite struct {
	Name, CertFile, KeyFile string
	// Serial is the certificate's serial number (hex), written in a
	// comment: a renewed certificate changes the file, so Caddy reloads
	// and presents it.
	Serial string
}

// WSSPath is the one path of the wss site (frp's FrpWebsocketPath).
const WSSPath = "/~!frp"

var caddyTmpl = template.Must(template.Must(template.New("Caddyfile").Funcs(template.FuncMap{
	"dict": func(v view, t HTTPTunnel) gateView { return gateView{v, t} },
}).Parse(gateTmpl)).Parse(`# Managed by tunnelsvc: this file is regenerated from the dashboard's
# settings and tunnels. Edit only between the custom-configuration markers
# at the end; everything else is overwritten.
{{- if .Global}}
{
{{- range .Global}}
	{{.}}
{{- end}}
}
{{- end}}
{{- if .Import}}

# The caddy package's own configuration: the operator's sites.
import {{.Import}}
{{- end}}

{{- if .RelayACME}}

# ACME HTTP-01 challenges this Caddy did not order itself are another
# edge's: the access gate asks the other edges. Everything else on HTTP
# goes to HTTPS. Only this domain's names: the operator's own plain-HTTP
# sites (the caddy package's :80) stay as they are.
http://router.{{.Domain}}, http://*.{{.Domain}} {
	handle /.well-known/acme-challenge/* {
		reverse_proxy {{.Gate}}
	}
	handle {
		redir https://{host}{{if .HTTPSPort}}:{{.HTTPSPort}}{{end}}{uri} 308
	}
}
{{- end}}

{{- if .WSS}}

# Machines whose network lets only port 443 out reach the tunnel server
# here (frp's wss transport). They pin the tunnel CA: this site presents
# its certificate for the name they ask for, and the daemon carries the
# connection on to the tunnel server. Certificate serial {{.WSS.Serial}}.
{{.WSS.Name}} {
	tls {{.WSS.CertFile}} {{.WSS.KeyFile}}
	handle ` + WSSPath + ` {
		reverse_proxy {{.Gate}}
	}
	handle {
		respond "not found" 404
	}
}
{{- end}}

# The dashboard.
{{.Addr "router"}} {
	reverse_proxy {{.Dashboard}}
}
{{- range .Tunnels}}

{{$.Addrs .}} {
{{- if $.Gated .Subdomain}}
	{{template "gate" dict $ .}}
{{- else}}
	request_header -X-Forwarded-User
	{{$.Proxy . "\t"}}
{{- end}}
{{- if .Fallback}}
	{{$.FallbackPage .}}
{{- end}}
}
{{- end}}
{{- if .Paused}}

# Paused in the dashboard, left out until resumed:
{{- range .Paused}} {{$.Host .}}{{end}}
{{- end}}

` + BeginCustom + `
{{.Custom}}` + EndCustom + `
`))

type view struct {
	Input
	Global []string
}

// TunnelIdleConns is how many idle connections Caddy keeps to each HTTP
// tunnel (its default is 32). Each new connection to a tunnel port costs
// a plugin call and a new stream through frps and frpc, so at a peak above
// 32 concurrent requests the default closed connections only to open them
// again a moment later.
const TunnelIdleConns = TunnelMaxConns

// TunnelMaxConns bounds the connections Caddy opens to each HTTP tunnel
// (Caddy's default: no bound); requests beyond it wait for a connection to
// come free. A new connection through a tunnel costs about 0.5 ms of
// processor time in frps, frpc and the daemon together, twenty times a
// request on a connection already open, so when a burst outran the tunnel
// Caddy opened thousands of them, each making the tunnel slower still:
// at a steady 3,200 requests per second on two cores the tunnel then
// served 1,000 with answers taking seconds and errors, and never came back
// while the load lasted. With the bound, and every connection kept
// (TunnelIdleConns is the same number), a burst waits in Caddy's queue
// instead. Upgraded connections (WebSocket) count until they close.
const TunnelMaxConns = 256

// UpstreamHost is where frps listens for tunnel connections; HopHost is
// where the daemon's visitor hop takes a PROXY-protocol tunnel's requests,
// on the same ports, with the visitor in VisitorHeader.
const (
	UpstreamHost  = visitorhop.FrpsAddr
	HopHost       = visitorhop.Addr
	VisitorHeader = visitorhop.VisitorHeader
)

// HopPorts are the tunnel ports Caddy sends to the visitor hop (HopHost),
// with the header version each: every target of the http tunnels that ask
// for a PROXY protocol header.
func HopPorts(ts []HTTPTunnel) map[int]string {
	out := map[int]string{}
	for _, t := range ts {
		if t.ProxyProtocol == "" {
			continue
		}
		out[t.Port] = t.ProxyProtocol
		for _, p := range t.More {
			out[p] = t.ProxyProtocol
		}
	}
	return out
}

// Proxy is t's reverse_proxy directive, its lines after the first at
// indentation ind: the tunnel's own port, then its other targets' with
// how to balance and retry among them, then the health check.
func (v view) Proxy(t HTTPTunnel, ind string) string {
	var b strings.Builder
	host := UpstreamHost
	if t.ProxyProtocol != "" {
		host = HopHost
	}
	fmt.Fprintf(&b, "reverse_proxy %s:%d", host, t.Port)
	for _, p := range t.More {
		fmt.Fprintf(&b, " %s:%d", host, p)
	}
	b.WriteString(" {\n")
	line := func(f string, a ...any) { b.WriteString(ind + "\t" + fmt.Sprintf(f, a...) + "\n") }
	// The visitor as Caddy saw it, replacing whatever a visitor sent
	// (Caddy sets X-Forwarded-For alike, trusting no client's).
	line("header_up X-Real-IP {remote_host}")
	if t.ProxyProtocol != "" {
		line("header_up %s {remote}", VisitorHeader)
	}
	if len(t.More) > 0 {
		policy := "first"
		if t.Balance == "round_robin" {
			policy = "round_robin"
		}
		line("lb_policy %s", policy)
		try := TryDuration
		if t.Fallback != "" {
			try = FallbackTryDuration
		}
		line("lb_try_duration %s", try)
		line("lb_try_interval %s", TryInterval)
		line("fail_duration %s", FailDuration)
	}
	if h := t.Health; h.Path != "" {
		line("health_uri %s", h.Path)
		line("health_interval %ds", h.IntervalS)
		line("health_timeout %ds", min(h.IntervalS, 5))
		if h.ExpectStatus != 0 {
			line("health_status %d", h.ExpectStatus)
		} else {
			line("health_status 2xx")
		}
		line("health_headers {")
		line("\tHost %s", v.Host(t.Subdomain))
		line("}")
	}
	line("transport http {")
	line("\tkeepalive_idle_conns_per_host %d", TunnelIdleConns)
	line("\tmax_conns_per_host %d", TunnelMaxConns)
	line("}")
	b.WriteString(ind + "}")
	return b.String()
}

// MaxFallbackChars bounds a fallback page's message (the API refuses a
// longer one).
const MaxFallbackChars = 500

// FallbackRetryAfter is the Retry-After of a fallback page, in seconds.
const FallbackRetryAfter = 30

// FallbackPage is t's handle_errors block: when the proxy cannot reach any
// machine of the site (a 502, 503 or 504 of Caddy's own: the app's own
// answers are not errors), the visitor gets a 503 page with the
// operator's message, on the site's own name, and Retry-After. The page
// is written whole into the Caddyfile: the message is HTML-escaped, and
// the characters a Caddyfile string gives meaning to ({ } \ ") become
// character references, so no message can change the file.
func (v view) FallbackPage(t HTTPTunnel) string {
	msg := html.EscapeString(t.Fallback)
	msg = strings.NewReplacer("{", "&#123;", "}", "&#125;", "\\", "&#92;", "\r", "", "\n", "<br>").Replace(msg)
	page := "<!doctype html><html lang='en'><head><meta charset='utf-8'><meta name='viewport' content='width=device-width, initial-scale=1'>" +
		"<title>" + html.EscapeString(v.Host(t.Subdomain)) + " is unavailable</title></head>" +
		"<body style='font-family:system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem;line-height:1.5'>" +
		"<h1>Unavailable for now</h1><p>" + msg + "</p></body></html>"
	return fmt.Sprintf(`handle_errors {
		@unreachable expression `+"`"+`{err.status_code} >= 502 && {err.status_code} <= 504`+"`"+`
		handle @unreachable {
			header Content-Type "text/html; charset=utf-8"
			header Cache-Control no-store
			header Retry-After %d
			respond "%s" 503
		}
	}`, FallbackRetryAfter, page)
}

// IdleConns is TunnelIdleConns, for the template.
func (view) IdleConns() int { return TunnelIdleConns }

// MaxConns is TunnelMaxConns, for the template.
func (view) MaxConns() int { return TunnelMaxConns }

// Host is sub's host name.
func (v view) Host(sub string) string { return sub + "." + v.Domain }

// Addrs is t's site address list: its subdomain's, then its own domains'.
func (v view) Addrs(t HTTPTunnel) string {
	out := v.Addr(t.Subdomain)
	for _, d := range t.Domains {
		if v.PlainHTTPPort != 0 {
			out += fmt.Sprintf(", http://%s:%d", d, v.PlainHTTPPort)
		} else {
			out += ", " + d
		}
	}
	return out
}

func (v view) Addr(sub string) string {
	host := sub + "." + v.Domain
	if v.PlainHTTPPort != 0 {
		return fmt.Sprintf("http://%s:%d", host, v.PlainHTTPPort)
	}
	return host
}

// hexSerial is a certificate serial number in hexadecimal.
var hexSerial = regexp.MustCompile(`^[0-9a-f]{1,64}$`)

// filePath is a file path a Caddyfile takes as one plain token.
var filePath = regexp.MustCompile(`^[A-Za-z0-9._/][A-Za-z0-9._/-]{0,254}$`)

// healthPath is what a health check's path may be: a path and query of
// characters a Caddyfile token and a URL take as they are.
var healthPath = regexp.MustCompile(`^/[A-Za-z0-9._~%/=&?-]{0,199}$`)

// CheckHealth says what is wrong with h, in words an API answer can carry.
func CheckHealth(h Health) error {
	if h == (Health{}) {
		return nil
	}
	if !healthPath.MatchString(h.Path) {
		return fmt.Errorf("health.path must start with / and hold only letters, digits and . _ ~ %% / = & ? - (at most 200 characters)")
	}
	if h.IntervalS < 1 || h.IntervalS > 3600 {
		return fmt.Errorf("health.interval_s must be between 1 and 3600")
	}
	if h.ExpectStatus != 0 && (h.ExpectStatus < 100 || h.ExpectStatus > 599) {
		return fmt.Errorf("health.expect_status must be an HTTP status between 100 and 599")
	}
	return nil
}

// check refuses any value that its validator refuses (the API checked it
// already; this catches anything that did not come through the API). The
// validators admit no character that is special in a Caddyfile (space,
// newline, quote, brace, '#', '{$ENV}'), so accepted values are written
// as plain tokens. Custom is the operator's own text and is not checked.
func (in Input) check() error {
	if err := validate.Domain(in.Domain); err != nil {
		return fmt.Errorf("domain %q: %w", in.Domain, err)
	}
	for _, t := range in.Tunnels {
		if err := validate.Label(t.Subdomain); err != nil {
			return fmt.Errorf("subdomain %q: %w", t.Subdomain, err)
		}
		if err := validate.Port(t.Port); err != nil {
			return fmt.Errorf("tunnel %s: %w", t.Subdomain, err)
		}
		for _, p := range t.More {
			if err := validate.Port(p); err != nil {
				return fmt.Errorf("tunnel %s target: %w", t.Subdomain, err)
			}
		}
		for _, d := range t.Domains {
			if err := validate.Domain(d); err != nil || !strings.Contains(d, ".") {
				return fmt.Errorf("tunnel %s: domain %q is not a fully qualified domain name", t.Subdomain, d)
			}
		}
		if n := utf8.RuneCountInString(t.Fallback); n > MaxFallbackChars {
			return fmt.Errorf("tunnel %s: a fallback message of %d characters", t.Subdomain, n)
		}
		if t.ProxyProtocol != "" && t.ProxyProtocol != "v1" && t.ProxyProtocol != "v2" {
			return fmt.Errorf("tunnel %s: PROXY protocol %q", t.Subdomain, t.ProxyProtocol)
		}
		if t.Balance != "" && t.Balance != "failover" && t.Balance != "round_robin" {
			return fmt.Errorf("tunnel %s: balance %q", t.Subdomain, t.Balance)
		}
		if err := CheckHealth(t.Health); err != nil {
			return fmt.Errorf("tunnel %s: %w", t.Subdomain, err)
		}
	}
	for _, sub := range in.Paused {
		if err := validate.Label(sub); err != nil {
			return fmt.Errorf("paused subdomain %q: %w", sub, err)
		}
	}
	if err := validate.HostPort(in.Dashboard); err != nil {
		return fmt.Errorf("dashboard address %q: %w", in.Dashboard, err)
	}
	if in.BindIP != "" {
		if _, err := validate.IP(in.BindIP); err != nil {
			return fmt.Errorf("bind_ip %q: %w", in.BindIP, err)
		}
	}
	if in.PlainHTTPPort != 0 {
		if err := validate.Port(in.PlainHTTPPort); err != nil {
			return fmt.Errorf("plain HTTP port: %w", err)
		}
	}
	if in.Admin != "" && in.Admin != "off" {
		if err := validate.HostPort(in.Admin); err != nil {
			return fmt.Errorf("admin address %q: %w", in.Admin, err)
		}
	}
	return nil
}

// Render returns the Caddyfile for in. Tunnels are sorted by subdomain so
// the same state always renders the same bytes.
func Render(in Input) ([]byte, error) {
	if in.Domain == "" {
		return nil, fmt.Errorf("no domain configured")
	}
	if err := in.check(); err != nil {
		return nil, fmt.Errorf("refusing to render the Caddyfile: %w", err)
	}
	v := view{Input: in}
	v.Tunnels = append([]HTTPTunnel(nil), in.Tunnels...)
	sort.Slice(v.Tunnels, func(i, j int) bool { return v.Tunnels[i].Subdomain < v.Tunnels[j].Subdomain })
	v.Paused = slices.Sorted(slices.Values(in.Paused))
	if len(in.Gates) > 0 && in.Gate == "" {
		return nil, fmt.Errorf("tunnels are gated but no gate address is set")
	}
	if w := in.WSS; w != nil {
		if in.Gate == "" || in.PlainHTTPPort != 0 {
			return nil, fmt.Errorf("the wss transport needs the gate's address and automatic HTTPS")
		}
		if err := validate.Hostname(w.Name); err != nil {
			return nil, fmt.Errorf("wss site name %q: %w", w.Name, err)
		}
		if !hexSerial.MatchString(w.Serial) {
			return nil, fmt.Errorf("wss certificate serial %q is not hexadecimal", w.Serial)
		}
		for _, f := range []string{w.CertFile, w.KeyFile} {
			if !filePath.MatchString(f) {
				return nil, fmt.Errorf("wss certificate file %q: a path of letters, digits and . _ - / only", f)
			}
		}
	}
	if in.RelayACME && (in.Gate == "" || in.PlainHTTPPort != 0) {
		return nil, fmt.Errorf("relaying ACME challenges needs the gate's address and automatic HTTPS")
	}
	if in.Admin != "" {
		v.Global = append(v.Global, "admin "+in.Admin)
	}
	if in.RelayACME {
		// Caddy's own HTTP-to-HTTPS redirects would take a challenge for
		// router.<domain> or a tunnel's name before the http:// block sees
		// it, and send the CA to HTTPS; the block redirects the rest.
		v.Global = append(v.Global, "auto_https disable_redirects")
	}
	if in.PlainHTTPPort != 0 {
		v.Global = append(v.Global, "auto_https off", fmt.Sprintf("http_port %d", in.PlainHTTPPort))
	}
	if in.BindIP != "" {
		v.Global = append(v.Global, "default_bind "+in.BindIP)
	}
	if in.HTTPSPort != 0 {
		if in.PlainHTTPPort != 0 {
			return nil, fmt.Errorf("HTTPSPort and PlainHTTPPort exclude each other")
		}
		v.Global = append(v.Global, fmt.Sprintf("http_port %d", in.HTTPPort), fmt.Sprintf("https_port %d", in.HTTPSPort))
	}
	switch {
	case in.RelayACME:
		// The relay passes HTTP-01 challenges only: a TLS-ALPN-01
		// validation that reaches another edge could not be answered, so
		// the edges of a cluster do not use it.
		issuer := "cert_issuer acme"
		if in.ACMECA != "" {
			issuer += " " + in.ACMECA
		}
		issuer += " {\n"
		if in.ACMECARoot != "" {
			issuer += "\t\ttrusted_roots " + in.ACMECARoot + "\n"
		}
		v.Global = append(v.Global, issuer+"\t\tdisable_tlsalpn_challenge\n\t}")
	default:
		if in.ACMECA != "" {
			v.Global = append(v.Global, "acme_ca "+in.ACMECA)
		}
		if in.ACMECARoot != "" {
			v.Global = append(v.Global, "acme_ca_root "+in.ACMECARoot)
		}
	}
	if c := strings.Trim(in.Custom, "\n"); c != "" {
		v.Custom = c + "\n"
	} else {
		v.Custom = ""
	}
	var buf bytes.Buffer
	if err := caddyTmpl.Execute(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ExtractCustom returns what stands between the markers in a deployed file
// (without the marker lines), or "" when there is none.
func ExtractCustom(file []byte) string {
	s := string(file)
	b := strings.Index(s, BeginCustom+"\n")
	if b < 0 {
		return ""
	}
	rest := s[b+len(BeginCustom)+1:]
	e := strings.Index(rest, EndCustom)
	if e < 0 {
		return ""
	}
	return rest[:e]
}
