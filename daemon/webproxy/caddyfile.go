// Package webproxy renders the web proxy's (Caddy's) configuration from the
// stored settings and tunnels, checks it with the real `caddy validate`,
// deploys it atomically and reloads caddy.service through the unit layer.
package webproxy

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"text/template"
)

// The custom-block markers (spec §4.4). What the operator writes between
// them in the deployed file survives every regeneration.
const (
	BeginCustom = "# ===== BEGIN CUSTOM CONFIGURATION ====="
	EndCustom   = "# ===== END CUSTOM CONFIGURATION ====="
)

// HTTPTunnel is one published web service: <Subdomain>.<domain> proxied to
// the tunnel's port on loopback.
type HTTPTunnel struct {
	Subdomain string
	Port      int
}

// Input is everything the Caddyfile is made from.
type Input struct {
	// Domain: the dashboard is served at router.<Domain>, tunnels at <sub>.<Domain>.
	Domain string
	// Dashboard is the daemon's own address (host:port) on loopback.
	Dashboard string
	Tunnels   []HTTPTunnel
	// BindIP, when set, is the only address Caddy listens on (default_bind).
	BindIP string
	// Custom is the operator's block, kept verbatim.
	Custom string
	// PlainHTTPPort, when non-zero, serves every site over plain HTTP on that
	// port with automatic HTTPS off (a TLS terminator in front; tests).
	PlainHTTPPort int
	// Admin is Caddy's admin endpoint; empty keeps Caddy's default
	// (localhost:2019, which `caddy reload` uses), "off" disables it.
	Admin string
}

var caddyTmpl = template.Must(template.New("Caddyfile").Parse(`# Managed by tunnelsvc: this file is regenerated from the dashboard's
# settings and tunnels. Edit only between the custom-configuration markers
# at the end; everything else is overwritten.
{{- if .Global}}
{
{{- range .Global}}
	{{.}}
{{- end}}
}
{{- end}}

# The dashboard.
{{.Addr "router"}} {
	reverse_proxy {{.Dashboard}}
}
{{- range .Tunnels}}

{{$.Addr .Subdomain}} {
	reverse_proxy 127.0.0.1:{{.Port}} {
		transport http {
			keepalive_idle_conns_per_host {{$.IdleConns}}
		}
	}
}
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
const TunnelIdleConns = 128

// IdleConns is TunnelIdleConns, for the template.
func (view) IdleConns() int { return TunnelIdleConns }

func (v view) Addr(sub string) string {
	host := sub + "." + v.Domain
	if v.PlainHTTPPort != 0 {
		return fmt.Sprintf("http://%s:%d", host, v.PlainHTTPPort)
	}
	return host
}

// Render returns the Caddyfile for in. Tunnels are sorted by subdomain so
// the same state always renders the same bytes.
func Render(in Input) ([]byte, error) {
	if in.Domain == "" {
		return nil, fmt.Errorf("no domain configured")
	}
	v := view{Input: in}
	v.Tunnels = append([]HTTPTunnel(nil), in.Tunnels...)
	sort.Slice(v.Tunnels, func(i, j int) bool { return v.Tunnels[i].Subdomain < v.Tunnels[j].Subdomain })
	if in.Admin != "" {
		v.Global = append(v.Global, "admin "+in.Admin)
	}
	if in.PlainHTTPPort != 0 {
		v.Global = append(v.Global, "auto_https off", fmt.Sprintf("http_port %d", in.PlainHTTPPort))
	}
	if in.BindIP != "" {
		v.Global = append(v.Global, "default_bind "+in.BindIP)
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
