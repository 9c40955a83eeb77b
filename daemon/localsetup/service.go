package localsetup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/logstream"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
	"github.com/tunnelsvc/tunnelsvc/daemon/webproxy"
)

// Units the installation drives.
const (
	UnitWebproxy     = "caddy.service"
	UnitTunnelServer = "revtunnel-server.service"
)

// InputError is a bad request; its text is shown to the user.
type InputError string

func (e InputError) Error() string { return string(e) }

// ErrBusy is returned when another background operation runs.
var ErrBusy = logstream.ErrBusy

// TunnelSource lists the published HTTP tunnels.
type TunnelSource interface {
	HTTPTunnels(ctx context.Context) ([]webproxy.HTTPTunnel, error)
}

// StoreTunnels lists the HTTP tunnels that have a subdomain from the store.
type StoreTunnels struct{ Store *store.Store }

// HTTPTunnels implements TunnelSource: the http tunnels that are not
// paused.
func (t StoreTunnels) HTTPTunnels(ctx context.Context) ([]webproxy.HTTPTunnel, error) {
	ts, err := t.Store.ListTunnels(ctx, 0)
	if err != nil {
		return nil, err
	}
	targets, err := t.Store.ListTargets(ctx, 0)
	if err != nil {
		return nil, err
	}
	more := map[int64][]int{}
	for _, tg := range targets {
		more[tg.TunnelID] = append(more[tg.TunnelID], tg.RemotePort)
	}
	domains, err := t.Store.TunnelDomains(ctx)
	if err != nil {
		return nil, err
	}
	var out []webproxy.HTTPTunnel
	for _, tn := range ts {
		if tn.Kind == "http" && tn.Subdomain != "" && !tn.Paused {
			out = append(out, webproxy.HTTPTunnel{Subdomain: tn.Subdomain, Port: tn.RemotePort, More: more[tn.ID], Balance: tn.Balance,
				Health: webproxy.Health(tn.Health), Domains: domains[tn.ID], ProxyProtocol: tn.ProxyProtocol,
				Fallback: tn.Fallback})
		}
	}
	return out, nil
}

// PausedHTTP implements PausedSource: the subdomains of paused http
// tunnels.
func (t StoreTunnels) PausedHTTP(ctx context.Context) ([]string, error) {
	ts, err := t.Store.ListTunnels(ctx, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, tn := range ts {
		if tn.Kind == "http" && tn.Subdomain != "" && tn.Paused {
			out = append(out, tn.Subdomain)
		}
	}
	return out, nil
}

// PausedSource names the paused http tunnels, which the Caddyfile leaves
// out (it names them in a comment).
type PausedSource interface {
	PausedHTTP(ctx context.Context) ([]string, error)
}

// HTTPGates implements GateSource: the tunnels in operator mode.
func (t StoreTunnels) HTTPGates(ctx context.Context) (map[string]webproxy.GateMode, error) {
	list, err := t.Store.HTTPTunnelAccess(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]webproxy.GateMode{}
	for _, a := range list {
		switch a.Access {
		case "operator":
			out[a.Subdomain] = webproxy.GateOperator
		case "sso":
			out[a.Subdomain] = webproxy.GateSSO
		}
	}
	return out, nil
}

// GateSource gives the gate modes of http tunnels by subdomain.
type GateSource interface {
	HTTPGates(ctx context.Context) (map[string]webproxy.GateMode, error)
}

// TunnelServer rebuilds and applies the tunnel server's configuration.
type TunnelServer interface {
	Reconcile(ctx context.Context) error
}

// Service runs the set-up operations.
type Service struct {
	Settings Settings
	Proxy    *webproxy.Deployer
	Units    units.Manager
	// Tunnels and TunnelServer may be nil until the tunnel engine is wired.
	Tunnels      TunnelSource
	TunnelServer TunnelServer
	// Firewall, when set, is told when a setting it follows changes.
	Firewall interface {
		Reconcile(ctx context.Context) error
	}
	Hub *logstream.Hub
	// ToolPath is where recommended packages' commands are looked for
	// (PATH-like; empty: $PATH).
	ToolPath string
	// BanTool, when set, is the ban tool's own check (banner.Service.Parts):
	// whether fail2ban is installed and, if so, can read the journal. The
	// missing parts then say what the Ban tool page says; without it they
	// look for fail2ban-client and python3 on ToolPath.
	BanTool func(ctx context.Context) (installed, journal bool)
	// OperatorCaddyfile is the caddy package's own Caddyfile; when it
	// exists, ours imports it so the operator's sites stay served.
	OperatorCaddyfile string
	// Dashboard is the daemon's own loopback address for the proxy.
	Dashboard func() string
	// OtherEdges, when set, reports whether the cluster has other edges:
	// the Caddyfile then sends the ACME challenges its Caddy did not
	// order to the gate, which asks them (webproxy.Input.RelayACME).
	OtherEdges func(ctx context.Context) (bool, error)
	// WSS, when set, gives the wss transport's site (webproxy.Input.WSS),
	// renewing its certificate when it must; it is served when Gate is set.
	// A failure leaves the site out and is logged: the rest of the
	// Caddyfile still follows the tunnels.
	WSS func(ctx context.Context) (*webproxy.WSSSite, error)
	// Gate is the access gate's loopback address (host:port); when Tunnels
	// implements GateSource, every http tunnel's site is checked there.
	Gate string
	Run  cmdrun.Runner
	// FRPS is the frps binary, for its version in the status.
	FRPS string
	// Database is shown as it is in the status (the URL already redacted).
	Database DatabaseStatus
	Log      *slog.Logger
	Now      func() time.Time

	publicIP ipCache // the checklist's last detected public address
	// versions keeps caddy's and frps's versions while their files are
	// the same: the status asks on every load of the dashboard.
	versions cmdrun.Memo
	// Life is the daemon's (nil: none): an installation outlives the
	// request that started it, but not the daemon.
	Life context.Context
	// deploys orders DeployProxy's callers: each reads what it renders
	// after the one before it wrote, so none writes an older Caddyfile
	// over a newer one.
	deploys sync.Mutex
}

// InstallRequest is POST /api/local/install's body.
type InstallRequest struct {
	Domain       string `json:"domain"`
	ServerHost   string `json:"server_host"`
	SkipWebproxy bool   `json:"skip_webproxy"`
}

// Validate applies the spec's rules and normalizes req.
func (r *InstallRequest) Validate() error {
	r.Domain = strings.ToLower(strings.TrimSpace(r.Domain))
	r.ServerHost = strings.TrimSpace(r.ServerHost)
	switch {
	case !r.SkipWebproxy && r.Domain == "":
		return InputError("domain is required")
	case r.SkipWebproxy && r.ServerHost == "":
		return InputError("server_host is required when skipping the proxy")
	case r.Domain != "" && validate.Domain(r.Domain) != nil:
		return InputError("invalid domain")
	}
	if r.ServerHost != "" {
		h, err := validate.Host(r.ServerHost)
		if validate.IsZone(err) {
			return InputError("invalid server_host: an address with a zone (%...) is not accepted")
		}
		if err != nil {
			return InputError("invalid server_host: give a hostname or an IP address")
		}
		r.ServerHost = strings.ToLower(h)
	}
	if r.ServerHost == "" {
		// Machines reach the tunnel server under the dashboard's name, which
		// check-dns verifies points here.
		r.ServerHost = "router." + r.Domain
	}
	return nil
}

// StartInstall validates req and starts the installation in the background,
// streaming its steps to the log hub.
func (s *Service) StartInstall(ctx context.Context, req InstallRequest) error {
	given := strings.TrimSpace(req.ServerHost) != ""
	if err := req.Validate(); err != nil {
		return err
	}
	// An edge that joined a cluster defaults to its host name, not to the
	// first edge's router.<domain>; no edge takes another's address.
	others, err := s.Settings.otherEdges(ctx)
	if err != nil {
		return err
	}
	if !given && len(others) > 0 {
		if h := HostName(); h != "" {
			req.ServerHost = h
		}
	}
	if err := s.Settings.AddressClash(ctx, req.ServerHost); err != nil {
		return err
	}
	op, err := s.Hub.Begin("install")
	if err != nil {
		return err
	}
	life := s.Life
	if life == nil {
		life = context.Background()
	}
	go s.install(life, op, req)
	return nil
}

func (s *Service) install(ctx context.Context, op *logstream.Op, req InstallRequest) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	step := func(text string) { op.Line("info", text) }
	fail := func(err error) {
		op.Line("error", units.Explain(err))
		op.Line("error", "installation failed; the previous configuration is unchanged")
		s.Log.Error("install failed", "err", err)
		op.Done(false)
	}

	step(fmt.Sprintf("saving settings: domain %q, server host %q", req.Domain, req.ServerHost))
	v := VPS{Domain: req.Domain, ServerHost: req.ServerHost, SkipWebproxy: req.SkipWebproxy}
	if err := s.Settings.SaveVPS(ctx, v); err != nil {
		fail(fmt.Errorf("saving settings: %w", err))
		return
	}

	if req.SkipWebproxy {
		step("skipping the web proxy as asked")
	} else {
		step("rendering the Caddyfile and checking it with caddy validate")
		if err := s.DeployProxy(ctx, true); err != nil {
			fail(err)
			return
		}
		step("Caddyfile deployed to " + s.Proxy.Path)
		if err := s.enableStart(ctx, UnitWebproxy, step); err != nil {
			fail(err)
			return
		}
	}

	if s.TunnelServer != nil {
		step("writing the tunnel server configuration and checking it with frps verify")
		if err := s.TunnelServer.Reconcile(ctx); err != nil {
			fail(fmt.Errorf("tunnel server configuration: %w", err))
			return
		}
	}
	if err := s.enableStart(ctx, UnitTunnelServer, step); err != nil {
		fail(err)
		return
	}

	v.InstalledAt = s.Now().UTC()
	if err := s.Settings.SaveVPS(ctx, v); err != nil {
		fail(fmt.Errorf("saving settings: %w", err))
		return
	}
	step("installation complete")
	op.Done(true)
}

func (s *Service) enableStart(ctx context.Context, unit string, step func(string)) error {
	step("enabling " + unit)
	if err := s.Units.Enable(ctx, unit); err != nil {
		return fmt.Errorf("enabling %s: %w", unit, err)
	}
	st, err := s.Units.State(ctx, unit)
	if err != nil {
		return fmt.Errorf("%s: %w", unit, err)
	}
	if st.ActiveState == "active" || st.ActiveState == "reloading" {
		step(unit + " is running")
		return nil
	}
	step("starting " + unit)
	if err := s.Units.Start(ctx, unit); err != nil {
		return fmt.Errorf("starting %s: %w", unit, err)
	}
	step(unit + " started")
	return nil
}

// ProxyInput gathers what the Caddyfile is made of. ok is false when
// neither a VPS record nor a domain exists.
func (s *Service) ProxyInput(ctx context.Context) (in webproxy.Input, ok bool, err error) {
	domain, err := s.Settings.Domain(ctx)
	if err != nil || domain == "" {
		return in, false, err
	}
	in.Domain = domain
	if s.Dashboard != nil {
		in.Dashboard = s.Dashboard()
	}
	if in.BindIP, err = s.Settings.BindIP(ctx); err != nil {
		return in, false, err
	}
	acme, err := s.Settings.ACME(ctx)
	if err != nil {
		return in, false, err
	}
	in.ACMECA, in.ACMECARoot = acme.CA, acme.CARoot
	if s.OperatorCaddyfile != "" {
		if _, err := os.Stat(s.OperatorCaddyfile); err == nil {
			in.Import = s.OperatorCaddyfile
		}
	}
	if s.Tunnels != nil {
		if in.Tunnels, err = s.Tunnels.HTTPTunnels(ctx); err != nil {
			return in, false, err
		}
		if ps, ok := s.Tunnels.(PausedSource); ok {
			if in.Paused, err = ps.PausedHTTP(ctx); err != nil {
				return in, false, err
			}
		}
		if gs, ok := s.Tunnels.(GateSource); ok {
			in.Gate = s.Gate
			if in.Gates, err = gs.HTTPGates(ctx); err != nil {
				return in, false, err
			}
		}
	}
	if s.WSS != nil && s.Gate != "" {
		in.Gate = s.Gate
		site, err := s.WSS(ctx)
		if err != nil {
			s.Log.Error("the wss transport's site is left out of the Caddyfile: machines on port 443 cannot connect", "err", err)
		} else {
			in.WSS = site
		}
	}
	if s.OtherEdges != nil && s.Gate != "" {
		if in.RelayACME, err = s.OtherEdges(ctx); err != nil {
			return in, false, err
		}
	}
	return in, true, nil
}

// ErrNoDomain: nothing to render the proxy configuration from.
var ErrNoDomain = errors.New("no VPS or domain configured")

// ProxyFile renders the Caddyfile that would be deployed (keeping the
// deployed custom block).
func (s *Service) ProxyFile(ctx context.Context) ([]byte, error) {
	in, ok, err := s.ProxyInput(ctx)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrNoDomain
	}
	return s.Proxy.RenderWithCustom(in)
}

// proxyManaged reports whether the web proxy was installed by us.
func (s *Service) proxyManaged(ctx context.Context) (bool, error) {
	v, err := s.Settings.VPS(ctx)
	return v != nil && !v.SkipWebproxy && !v.InstalledAt.IsZero(), err
}

// DeployProxy re-renders and applies the Caddyfile. Unless force is set it
// does nothing while the proxy is not installed.
func (s *Service) DeployProxy(ctx context.Context, force bool) error {
	s.deploys.Lock()
	defer s.deploys.Unlock()
	if !force {
		if ok, err := s.proxyManaged(ctx); err != nil || !ok {
			return err
		}
	}
	in, ok, err := s.ProxyInput(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return ErrNoDomain
	}
	_, err = s.Proxy.Deploy(ctx, in)
	return err
}

// ProxyDesired is the Caddyfile DeployProxy would apply now; inUse is
// false while the web proxy is not installed (or has no domain).
func (s *Service) ProxyDesired(ctx context.Context) ([]byte, bool, error) {
	if ok, err := s.proxyManaged(ctx); err != nil || !ok {
		return nil, false, err
	}
	in, ok, err := s.ProxyInput(ctx)
	if err != nil || !ok {
		return nil, false, err
	}
	b, err := s.Proxy.RenderWithCustom(in)
	return b, err == nil, err
}

// Skip saves the domain (if given) without installing anything.
func (s *Service) Skip(ctx context.Context, domain string) error {
	domain = strings.ToLower(strings.TrimSpace(domain))
	if domain == "" {
		return nil
	}
	if validate.Domain(domain) != nil {
		return InputError("invalid domain")
	}
	return s.Settings.SetDomain(ctx, domain)
}

// SetDashboardPrivate saves the setting and lets the firewall follow it.
func (s *Service) SetDashboardPrivate(ctx context.Context, on bool) error {
	if err := s.Settings.SetDashboardPrivate(ctx, on); err != nil {
		return err
	}
	if s.Firewall != nil {
		return s.Firewall.Reconcile(ctx)
	}
	return nil
}

// SetBindIP validates and saves the bind address, then reconciles the tunnel
// server and the proxy at once. When either refuses, the old address is put
// back and re-applied, and the tool's words are returned.
func (s *Service) SetBindIP(ctx context.Context, ip string) (string, error) {
	ip = strings.TrimSpace(ip)
	if ip != "" {
		a, err := validate.IP(ip)
		if validate.IsZone(err) {
			return "", InputError("bind_ip must be an IP address without a zone (%...): give the interface's address itself")
		}
		if err != nil {
			return "", InputError("bind_ip must be an IP address (or empty to clear it)")
		}
		ip = a.String()
	}
	old, err := s.Settings.BindIP(ctx)
	if err != nil {
		return "", err
	}
	if err := s.Settings.SetBindIP(ctx, ip); err != nil {
		return "", err
	}
	if err := s.reconcileAll(ctx); err != nil {
		if rerr := s.Settings.SetBindIP(ctx, old); rerr == nil {
			s.reconcileAll(ctx)
		}
		return "", err
	}
	return ip, nil
}

// reconcileAll applies the tunnel server and proxy configuration.
func (s *Service) reconcileAll(ctx context.Context) error {
	if s.TunnelServer != nil {
		if err := s.TunnelServer.Reconcile(ctx); err != nil {
			return fmt.Errorf("tunnel server: %w", err)
		}
	}
	if err := s.DeployProxy(ctx, false); err != nil {
		return fmt.Errorf("web proxy: %w", err)
	}
	if s.Firewall != nil {
		if err := s.Firewall.Reconcile(ctx); err != nil {
			return fmt.Errorf("firewall: %w", err)
		}
	}
	return nil
}
