package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

// The wss figure: the same HTTP requests through a machine on the direct
// transport (frpc → frps's port) and through a machine on the wss
// transport (frpc → Caddy on the HTTPS port → the daemon's bridge → frps),
// side by side, both behind the same Caddy site shape.

var serverPortLine = regexp.MustCompile(`(?m)^serverPort = \d+$`)

// WSSTransport measures it.
func WSSTransport(o Options) Row {
	row := Row{
		Figure:   "HTTP through a machine on the wss transport (443, through Caddy and the daemon) / on the direct transport (closed loop, 50 concurrent)",
		Goal:     "reported",
		Baseline: "the same requests through a machine on the direct transport, same run",
	}
	fail := func(err error) Row { row.Measured = "failed: " + err.Error(); return row }
	dir := filepath.Join(o.Dir, "wss")
	d, err := StartDaemon(o.Bins, dir)
	if err != nil {
		return fail(err)
	}
	var procs []*Proc
	defer func() {
		for _, p := range procs {
			p.Kill(syscall.SIGTERM)
		}
		d.Stop()
	}()
	if err := d.Setup(); err != nil {
		return fail(err)
	}
	if err := d.Call(d.Client, "POST", "/api/local/skip", map[string]string{"domain": domain}, nil); err != nil {
		return fail(err)
	}
	frps, err := StartFRPS(o.Bins, d)
	if err != nil {
		return fail(err)
	}
	procs = append(procs, frps)
	origin, originAddr, err := serve("127.0.0.1:0", jsonHandler())
	if err != nil {
		return fail(err)
	}
	defer origin.Close()
	originPort, _ := strconv.Atoi(originAddr[len("127.0.0.1:"):])

	// The wss site's certificate, as the daemon issues it when it renders
	// the Caddyfile (here for the diagnostic view).
	var file string
	if err := d.Call(d.Client, "GET", "/api/debug/webproxyfile", nil, &file); err != nil {
		return fail(err)
	}
	certFile := filepath.Join(dir, "root", revtunnel.WSSCertPath)
	keyFile := filepath.Join(dir, "root", revtunnel.WSSKeyPath)
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return fail(fmt.Errorf("the daemon wrote no wss certificate: %w", err))
	}
	cert, err := tunnelca.ParseCert(certPEM)
	if err != nil {
		return fail(err)
	}
	httpsPort, err := FreePort()
	if err != nil {
		return fail(err)
	}
	httpPort, _ := FreePort()
	closed, _ := FreePort()
	// Caddy on the HTTPS port with the wss site, rendered by the daemon's
	// renderer; its ACME CA is a closed port on loopback, so the
	// dashboard's certificate is never asked for anywhere else.
	wssFile, err := webproxy.Render(webproxy.Input{Domain: domain, Dashboard: d.Listen, Gate: d.GateAddr, Admin: "off",
		HTTPPort: httpPort, HTTPSPort: httpsPort, ACMECA: fmt.Sprintf("https://127.0.0.1:%d/dir", closed),
		WSS: &webproxy.WSSSite{Name: tunnelca.ServerName, CertFile: certFile, KeyFile: keyFile, Serial: cert.SerialNumber.Text(16)}})
	if err != nil {
		return fail(err)
	}
	edge, err := startCaddyFile(o, filepath.Join(dir, "Caddyfile.wss"), wssFile, httpsPort)
	if err != nil {
		return fail(err)
	}
	procs = append(procs, edge)

	// Two machines serving the same origin, one per transport.
	var ports [2]int
	for i, name := range []string{"direct", "wss"} {
		tok, err := d.NewToken()
		if err != nil {
			return fail(err)
		}
		var reg struct {
			AgentToken string `json:"agent_token"`
		}
		if err := d.Call(d.Anon, "POST", "/api/bootstrap", map[string]string{"token": tok, "name": name, "username": "bench"}, &reg); err != nil {
			return fail(err)
		}
		id, err := d.MachineID(name)
		if err != nil {
			return fail(err)
		}
		tun, err := d.AddTunnel(id, "web", "http", originPort, "app-"+name)
		if err != nil {
			return fail(err)
		}
		ports[i] = tun.RemotePort
		conf, err := d.ClientConfig(id)
		if err != nil {
			return fail(err)
		}
		if name == "wss" {
			var chosen struct {
				Config string `json:"revtunnel_client_config"`
			}
			if err := d.CallAuth(d.Anon, "POST", "/api/machines/transport", reg.AgentToken, map[string]string{"transport": "wss"}, &chosen); err != nil {
				return fail(err)
			}
			// The config dials 443; Caddy here listens on httpsPort.
			conf = serverPortLine.ReplaceAllString(chosen.Config, fmt.Sprintf("serverPort = %d", httpsPort))
		}
		c, err := StartFRPC(o.Bins, dir, name, conf)
		if err != nil {
			return fail(err)
		}
		procs = append(procs, c)
	}

	// The web proxy in front of both tunnels, as for every HTTP figure.
	front, err := FreePort()
	if err != nil {
		return fail(err)
	}
	frontFile, err := webproxy.Render(webproxy.Input{Domain: domain, Dashboard: d.Listen, Admin: "off", PlainHTTPPort: front,
		Tunnels: []webproxy.HTTPTunnel{{Subdomain: "app-direct", Port: ports[0]}, {Subdomain: "app-wss", Port: ports[1]}}})
	if err != nil {
		return fail(err)
	}
	caddy, err := startCaddyFile(o, filepath.Join(dir, "Caddyfile"), frontFile, front)
	if err != nil {
		return fail(err)
	}
	procs = append(procs, caddy)
	for _, host := range []string{"app-direct." + domain, "app-wss." + domain} {
		if err := waitFor(context.Background(), 30*time.Second, "GET "+host, func() error { return getHost(front, host) }); err != nil {
			return fail(err)
		}
	}

	url := fmt.Sprintf("http://127.0.0.1:%d/", front)
	type spent struct{ procs time.Duration }
	var directCPU, wssCPU spent
	vps := []*Proc{caddy, frps, d.Proc, edge}
	phase := func(host string, s *spent) func(time.Duration) load {
		return func(dur time.Duration) load {
			c0 := cpuOf(vps...)
			l := attack(url, hostHeader(host), 50, dur)
			s.procs += cpuOf(vps...) - c0
			return l
		}
	}
	ls := alternate(o.Duration, phase("app-direct."+domain, &directCPU), phase("app-wss."+domain, &wssCPU))
	direct, wss := ls[0], ls[1]
	row.Value = ratio(wss.Rate, direct.Rate)
	row.Measured = fmt.Sprintf("%.0f / %.0f req/s (%.3f; success %.1f%% / %.1f%%); VPS CPU (Caddy, frps, the daemon, Caddy's HTTPS side) %s / %s per request",
		wss.Rate, direct.Rate, row.Value, wss.Success*100, direct.Success*100,
		perRequest(wssCPU.procs, wss.Requests), perRequest(directCPU.procs, direct.Requests))
	row.Met = wss.Success == 1 && direct.Success == 1
	return row
}

// startCaddyFile runs a Caddy of its own on file (written to path) and
// waits until it listens on port.
func startCaddyFile(o Options, path string, file []byte, port int) (*Proc, error) {
	if err := os.WriteFile(path, file, 0o644); err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	p, err := StartProcEnv("caddy "+filepath.Base(path), []string{"XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir},
		o.Bins.Caddy, "run", "--config", path, "--adapter", "caddyfile")
	if err != nil {
		return nil, err
	}
	if err := waitTCP(fmt.Sprintf("127.0.0.1:%d", port), 15*time.Second, p); err != nil {
		p.Kill(syscall.SIGTERM)
		return nil, fmt.Errorf("%w: %s", err, p.Out.String())
	}
	return p, nil
}
