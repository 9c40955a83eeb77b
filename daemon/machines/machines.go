// Package machines owns machine registration (one-time bootstrap tokens),
// machines, their tunnels and the activity feed. It reaches frp only through
// revtunnel's pure rendering; it runs no tools.
package machines

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
	"github.com/tunnelsvc/tunnelsvc/daemon/version"
)

// Defaults.
const (
	DefaultTokenTTL = 60 * time.Minute
	MaxTokenTTL     = 7 * 24 * time.Hour
	// DefaultAgentLocalPort is where the agent listens on each machine (127.0.0.1).
	DefaultAgentLocalPort = 7390
	// ActivityPerSource is the activity feed's size per source (spec §8).
	ActivityPerSource = 25
	staleTokenLimit   = 200
)

// KeySource provides the VPS's default SSH public key, which bootstrap
// appends to the machine user's authorized keys.
type KeySource interface {
	DefaultPublicKey(ctx context.Context) (string, error)
}

// KeyIdentifier is a KeySource that also names the key it hands out, so
// each machine records which key it got (the key list's machine_count).
type KeyIdentifier interface {
	DefaultKey(ctx context.Context) (id, publicKey string, err error)
}

// ErrNameTaken is a machine name another machine already has.
var ErrNameTaken = store.ErrNameTaken

// InputError is a bad request: the message says which field and why.
type InputError string

func (e InputError) Error() string { return string(e) }

// ErrInvalidToken is answered for every bad, used or expired bootstrap token.
var ErrInvalidToken = errors.New("invalid or expired token")

// ErrNotFound is an unknown machine or tunnel id.
var ErrNotFound = store.ErrNotFound

// Service is the machines domain.
type Service struct {
	Store  *store.Store
	Sealer *seal.Sealer
	Keys   KeySource
	Log    *slog.Logger
	Now    func() time.Time
	// Health gives the last health check of each target of tunnels served
	// by several machines (nil: none shown).
	Health HealthResults
	// Limiter counts failed bootstraps, rejoins and transport changes per
	// client address (required).
	Limiter *auth.Limiter
	// Ports is the range tunnel and agent ports come from.
	Ports store.PortRange
	// Reach says where machines reach this server (the frps address in
	// client configs, the host in SSH commands), asked at every use
	// (required; its last resort is the host a request reached the
	// dashboard by).
	Reach    *reach.Resolver
	FRPSPort int
	// WSSPort is the web proxy's HTTPS port, where machines on the wss
	// transport reach the tunnel server (0: DefaultWSSPort).
	WSSPort int
	// AgentLocalPort is where the agent listens on machines.
	AgentLocalPort int
	// SSHLocalPort is the machines' sshd port (22); tests point it at an
	// echo server.
	SSHLocalPort int
	// ClientAdminPort is frpc's admin webServer port on machines' loopback
	// (0: frpconf.DefaultAdminPort).
	ClientAdminPort int
	// CA is the tunnel CA every client config pins (nil: the one kept in
	// Store, sealed by Sealer).
	CA *tunnelca.Authority
	// ClientConfigPath is where machines install their config, which is
	// also its own trustedCaFile (empty: frpconf.DefaultClientConfigPath).
	ClientConfigPath string
	// OnChange, when set, is called after a machine's tunnels changed (a
	// tunnel created, updated or deleted, or the machine deleted), before
	// the API answers: what must hold when the operator sees the change
	// saved (the access gate's rules). The rest follows the store's
	// announcement of the change.
	OnChange func(machineID int64)
	// Exposure says how machines and tunnels are reached from outside
	// besides the host (which Reach answers); nil means no domain and
	// loopback listeners.
	Exposure func(ctx context.Context) (Exposure, error)
	// Desire has the delivery reconciler, the one writer of desired
	// state, render a machine's config now, record it as desired (a new
	// generation when it changed) and deliver it at once: after a rejoin
	// (a new credential) or a change of transport.
	Desire func(ctx context.Context, machineID int64) error
	// BundleVersion is the server's machine bundle version; nil or an
	// error leaves it unknown (every machine then shows outdated).
	BundleVersion func() (string, error)
	// EdgeName is this daemon's edge: the home edge of the machines that
	// join through it.
	EdgeName string
	// ClusterEdges (nil: this daemon is its cluster's only edge) lists the
	// edges every machine keeps a tunnel client for, asked at every use.
	ClusterEdges func(ctx context.Context) ([]EdgeTarget, error)
	// TunnelVersion is the version of this daemon's own tunnel server, as
	// recorded ("" or nil: not known yet, and clients are not asked for
	// what it may not speak). A cluster's edges say theirs in
	// ClusterEdges.
	TunnelVersion func() string

	// lists holds the last machine list List built.
	lists listCache
}

// Exposure is what decides the addresses the dashboard shows.
type Exposure struct {
	// Host is this server's public name (the set-up's server host).
	Host string
	// Domain: HTTP tunnels are https://<subdomain>.<Domain>.
	Domain string
	// BindIP is where tunnel listeners bind; "" means loopback.
	BindIP string
	// FirewallSvc: our firewall closes every port not marked public.
	FirewallSvc bool
	// BundleVersion is the server's machine bundle version ("" when
	// unknown), which machines are compared against.
	BundleVersion string
	// TunnelServer is "" while this edge's tunnel server answers, else
	// what is wrong with it (see StatusOf).
	TunnelServer string
}

func (s *Service) changed(machineID int64) {
	if s.OnChange != nil {
		s.OnChange(machineID)
	}
}

func (s *Service) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

func (s *Service) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

func (s *Service) event(ctx context.Context, e store.Event) {
	e.CreatedAt = s.now()
	if err := s.Store.InsertEvent(context.WithoutCancel(ctx), e); err != nil {
		s.log().Error("activity event write failed", "kind", e.Kind, "err", err)
	}
}

// NewToken is a freshly issued bootstrap token; Token is shown only now.
type NewToken struct {
	ID        int64
	Label     string
	Token     string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// CreateToken issues a single-use bootstrap token valid for ttl (0: the default).
func (s *Service) CreateToken(ctx context.Context, ttl time.Duration) (NewToken, error) {
	return s.CreateLabeledToken(ctx, ttl, "")
}

// CreateLabeledToken is CreateToken with a label the operator chose.
func (s *Service) CreateLabeledToken(ctx context.Context, ttl time.Duration, label string) (NewToken, error) {
	label = strings.TrimSpace(label)
	if label != "" {
		if err := checkName("label", label); err != nil {
			return NewToken{}, err
		}
	}
	if ttl == 0 {
		ttl = DefaultTokenTTL
	}
	if ttl < time.Minute || ttl > MaxTokenTTL {
		return NewToken{}, InputError(fmt.Sprintf("expires_in_minutes must be between 1 and %d", int(MaxTokenTTL.Minutes())))
	}
	tok, err := auth.NewToken()
	if err != nil {
		return NewToken{}, err
	}
	now := s.now()
	exp := now.Add(ttl)
	id, err := s.Store.InsertBootstrapToken(ctx, auth.HashToken(tok), label, now, exp)
	if err != nil {
		return NewToken{}, err
	}
	return NewToken{ID: id, Label: label, Token: tok, CreatedAt: now.UTC(), ExpiresAt: exp.UTC()}, nil
}

// Token returns one token's state, to follow a join.
func (s *Service) Token(ctx context.Context, id int64) (store.TokenState, error) {
	return s.Store.GetBootstrapToken(ctx, id, s.now())
}

// PendingTokens lists unused, unexpired tokens (without their secret).
func (s *Service) PendingTokens(ctx context.Context) ([]store.BootstrapToken, error) {
	return s.Store.ListPendingBootstrapTokens(ctx, s.now())
}

// RevokeToken deletes a pending token.
func (s *Service) RevokeToken(ctx context.Context, id int64) error {
	return s.Store.DeleteBootstrapToken(ctx, id)
}

// BootstrapRequest is POST /api/bootstrap's input plus who sent it.
type BootstrapRequest struct {
	Token, Name, Username string
	Client                netip.Addr
	// FallbackHost is the dashboard's host as the machine reached it, used
	// as the frps address when none is configured.
	FallbackHost string
}

// Registration is POST /api/bootstrap's answer.
type Registration struct {
	MachineID      int64  `json:"-"`
	TunnelPort     int    `json:"tunnel_port"`
	VPSKey         string `json:"vps_ssh_public_key"`
	ClientConfig   string `json:"revtunnel_client_config"`
	AgentToken     string `json:"agent_token"`
	AgentLocalPort int    `json:"agent_local_port"`
	// Transport is the one ClientConfig uses, and TunnelServer where the
	// machine can reach the tunnel server on each: the join tries the
	// direct port and, when it is closed, asks for wss (ChooseTransport).
	Transport    string       `json:"transport"`
	TunnelServer TunnelServer `json:"tunnel_server"`
}

// TunnelServer is where the tunnel server is reached: Host on Port
// directly, or on WSSPort through the web proxy.
type TunnelServer struct {
	Host    string `json:"host"`
	Port    int    `json:"port"`
	WSSPort int    `json:"wss_port"`
}

// tunnelServer is where the home edge's tunnel server is, on host.
func (s *Service) tunnelServer(host string) TunnelServer {
	return TunnelServer{Host: host, Port: s.FRPSPort, WSSPort: s.wssPort()}
}

// RateLimitedError says how long an address must wait.
type RateLimitedError = auth.RateLimitedError

// Bootstrap registers a machine with a one-time token. Every failure is
// recorded as a stale-token attempt; bad tokens count against the address.
func (s *Service) Bootstrap(ctx context.Context, req BootstrapRequest) (Registration, error) {
	if ok, wait := s.Limiter.Check(req.Client); !ok {
		s.stale(ctx, req.Client, "rate limited")
		return Registration{}, &auth.RateLimitedError{RetryAfter: wait}
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"token", req.Token}, {"name", req.Name}, {"username", req.Username}} {
		if strings.TrimSpace(f.v) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		s.stale(ctx, req.Client, "missing "+strings.Join(missing, ", "))
		return Registration{}, InputError(strings.Join(missing, ", ") + " required")
	}
	name, username := strings.TrimSpace(req.Name), strings.TrimSpace(req.Username)
	if err := checkName("name", name); err != nil {
		s.stale(ctx, req.Client, err.Error())
		return Registration{}, err
	}
	if err := checkUsername(username); err != nil {
		s.stale(ctx, req.Client, err.Error())
		return Registration{}, err
	}
	// A new machine's home is this edge. The address goes into its frpc
	// config: refused before the token is spent.
	target, err := s.Dial(ctx, store.Machine{HomeEdge: s.EdgeName}, req.FallbackHost)
	var bad InputError
	if errors.As(err, &bad) || errors.Is(err, reach.ErrNoAddress) {
		s.stale(ctx, req.Client, "no valid server address")
		if errors.Is(err, reach.ErrNoAddress) {
			err = InputError(err.Error())
		}
	}
	if err != nil {
		return Registration{}, err
	}
	host := target.Host
	var vpsKey, keyID string
	if ki, ok := s.Keys.(KeyIdentifier); ok {
		keyID, vpsKey, err = ki.DefaultKey(ctx)
	} else {
		vpsKey, err = s.Keys.DefaultPublicKey(ctx)
	}
	if err != nil {
		return Registration{}, fmt.Errorf("read the VPS SSH public key: %w", err)
	}
	secret, err := auth.NewToken()
	if err != nil {
		return Registration{}, err
	}
	agentToken := deriveAgentToken(secret)
	hash := auth.HashToken(req.Token)
	now := s.now()
	// The CA first (made on the first registration): the config is
	// rendered inside the registration's transaction, which must not wait
	// for another write.
	ca, err := s.TunnelCA(ctx)
	if err != nil {
		return Registration{}, err
	}
	var cfg string
	m, err := s.Store.RegisterMachine(ctx, store.NewMachine{
		Name: name, Username: username, ClientAddr: addrString(req.Client),
		SecretHash: auth.HashToken(secret), AgentTokenHash: auth.HashToken(agentToken),
		AgentLocalPort: s.agentLocalPort(), SSHLocalPort: s.sshLocalPort(), SSHKeyID: keyID,
		Seal: func(id int64) (string, error) { return s.Sealer.Seal([]byte(secret), secretAAD(id)), nil },
		Now:  now, TokenHash: hash, Ports: s.Ports, ConsumeToken: true, HomeEdge: s.EdgeName,
		// The machine installs this very config: it is generation 1, applied.
		Config: func(m store.Machine) (string, string, error) {
			c, err := s.renderClient(ca, m, secret, target, "", nil, nil)
			cfg = c
			return ConfigDigest(c), host, err
		},
	})
	if errors.Is(err, store.ErrTokenInvalid) {
		s.stale(ctx, req.Client, s.Store.TokenFailureReason(ctx, hash, now))
		s.Limiter.Fail(req.Client)
		return Registration{}, ErrInvalidToken
	}
	if errors.Is(err, store.ErrNameTaken) {
		s.stale(ctx, req.Client, "machine name already in use")
		return Registration{}, ErrNameTaken
	}
	if err != nil {
		s.stale(ctx, req.Client, "registration failed: "+err.Error())
		return Registration{}, err
	}
	s.event(ctx, store.Event{Source: "machine", Kind: "registered", MachineID: m.ID,
		Message: fmt.Sprintf("machine %q (user %s) registered from %s with tunnel port %d", m.Name, m.Username, addrString(req.Client), m.TunnelPort)})
	return Registration{
		MachineID: m.ID, TunnelPort: m.TunnelPort, VPSKey: vpsKey, ClientConfig: cfg,
		AgentToken: agentToken, AgentLocalPort: m.AgentLocalPort,
		Transport: frpconf.TransportTCP, TunnelServer: s.tunnelServer(host),
	}, nil
}

func (s *Service) agentLocalPort() int {
	if s.AgentLocalPort == 0 {
		return DefaultAgentLocalPort
	}
	return s.AgentLocalPort
}

func (s *Service) sshLocalPort() int {
	if s.SSHLocalPort == 0 {
		return 22
	}
	return s.SSHLocalPort
}

// deriveAgentToken is the machine's agent token, derived from its secret
// (HMAC-SHA256) so the daemon can present it to the machine's agent from the
// sealed secret, while the database keeps only its hash. The agent token
// does not reveal the secret.
func deriveAgentToken(secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("tunnel-agent-token"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// AgentAccess is what the daemon needs to reach a machine's agent: the port
// of its agent tunnel on this server's loopback and the agent token.
type AgentAccess struct {
	Port  int
	Token string
	// Outdated: the agent, when last reached, predated signed requests.
	Outdated bool
}

// Agent returns how to reach machine id's agent.
func (s *Service) Agent(ctx context.Context, id int64) (AgentAccess, error) {
	m, err := s.Store.GetMachine(ctx, id)
	if err != nil {
		return AgentAccess{}, err
	}
	secret, err := s.Sealer.Open(m.SecretSealed, secretAAD(m.ID))
	if err != nil {
		return AgentAccess{}, fmt.Errorf("machine %d credential: %w", m.ID, err)
	}
	tok := deriveAgentToken(string(secret))
	if auth.HashToken(tok) != m.AgentTokenHash {
		return AgentAccess{}, fmt.Errorf("machine %d was registered before agent tokens were derived; bootstrap it again", m.ID)
	}
	return AgentAccess{Port: m.AgentPort, Token: tok, Outdated: m.AgentOutdated}, nil
}

// SetAgentOutdated records whether the machine's agent predates signed
// requests; the machine then says what to do about it (OutdatedAgentHint).
func (s *Service) SetAgentOutdated(ctx context.Context, id int64, outdated bool) error {
	return s.Store.SetAgentOutdated(ctx, id, outdated)
}

func secretAAD(id int64) []byte { return []byte("machine-secret:" + strconv.FormatInt(id, 10)) }

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func (s *Service) stale(ctx context.Context, client netip.Addr, reason string) {
	err := s.Store.InsertStaleTokenAttempt(context.WithoutCancel(ctx), store.StaleTokenAttempt{
		CreatedAt: s.now(), ClientAddr: addrString(client), Reason: reason,
	})
	if err != nil {
		s.log().Error("stale-token attempt write failed", "err", err)
	}
}

// StaleTokenAttempts lists failed bootstraps, newest first.
func (s *Service) StaleTokenAttempts(ctx context.Context) ([]store.StaleTokenAttempt, error) {
	return s.Store.ListStaleTokenAttempts(ctx, staleTokenLimit)
}

// renderClient renders machine m's config for edge e: the home edge's
// ("" for edge) is client.toml with the admin port configured; another
// edge's is client-<edge>.toml, whose frpc takes an admin port of its own.
// targets are its parts in tunnels served by several machines.
func (s *Service) renderClient(ca *tunnelca.CA, m store.Machine, secret string, e EdgeTarget, edge string, tunnels []store.Tunnel, targets []store.Target) (string, error) {
	admin, path := s.ClientAdminPort, s.ClientConfigPath
	if admin == 0 {
		admin = frpconf.DefaultAdminPort
	}
	if path == "" {
		path = frpconf.DefaultClientConfigPath
	}
	if edge != "" {
		admin += 1 + int((e.ID-1)%500)
		path = filepath.Join(filepath.Dir(path), agent.EdgeConfigFile(edge))
	}
	transport, port := transportOf(m), e.Port
	if transport == frpconf.TransportWSS {
		port = s.wssPort()
	}
	return frpconf.ClientConfig(frpconf.ClientParams{
		Transport:  transport,
		ServerAddr: e.Host, ServerPort: port, MachineID: m.ID, Secret: secret,
		SSHLocalPort: m.SSHLocalPort, TunnelPort: m.TunnelPort,
		AgentLocalPort: m.AgentLocalPort, AgentPort: m.AgentPort, Tunnels: tunnels, Targets: targets,
		AdminPort: admin,
		CA:        string(ca.CertPEM), ServerName: tunnelca.ServerName, ConfigPath: path,
		WireV2: speaksWireV2(m.Report.ClientVersion) && speaksWireV2(e.TunnelVersion),
	})
}

// speaksWireV2 tells whether frp version v (frpc's or frps's, "" when not
// known) speaks wire protocol v2. A client asks for it only when both
// sides do: an edge not upgraded yet keeps its updated machines on v1.
func speaksWireV2(v string) bool {
	return v != "" && version.Compare(v, frpconf.WireV2Since) >= 0
}

// EdgeTarget is an edge as a machine's tunnel client dials it.
type EdgeTarget struct {
	ID   int64
	Name string
	Host string
	Port int
	// TunnelVersion is the version of the edge's tunnel server ("" when
	// not known yet).
	TunnelVersion string
}

// edgeTargets lists the edges machines keep a client for: nil when this
// daemon is its cluster's only one (or ClusterEdges is nil).
func (s *Service) edgeTargets(ctx context.Context) ([]EdgeTarget, error) {
	if s.ClusterEdges == nil {
		return nil, nil
	}
	es, err := s.ClusterEdges(ctx)
	if err != nil || len(es) <= 1 {
		return nil, err
	}
	return es, nil
}

// tunnelVersion is TunnelVersion's answer.
func (s *Service) tunnelVersion() string {
	if s.TunnelVersion == nil {
		return ""
	}
	return s.TunnelVersion()
}

// HomeOf is machine m's home edge among es: the edge it joined through,
// else (that edge is gone, or it joined before edges) the oldest.
func HomeOf(m store.Machine, es []EdgeTarget) EdgeTarget {
	home := es[0]
	for _, e := range es {
		if e.Name == m.HomeEdge {
			return e
		}
		if e.ID < home.ID {
			home = e
		}
	}
	return home
}

// DesiredEdges renders machine m's clients for the edges besides its home
// edge: none when the cluster has one edge. An edge with no address yet
// (it never said where machines reach it) is left out until it has one.
func (s *Service) DesiredEdges(ctx context.Context, m store.Machine) ([]agent.EdgeClient, error) {
	r, err := s.renderer(ctx, m.ID, "")
	if err != nil {
		return nil, err
	}
	return r.DesiredEdges(ctx, m)
}

// TunnelCA is the CA machines pin.
func (s *Service) TunnelCA(ctx context.Context) (*tunnelca.CA, error) {
	a := s.CA
	if a == nil {
		a = &tunnelca.Authority{Store: s.Store, Sealer: s.Sealer, Now: s.Now}
	}
	ca, err := a.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("tunnel CA: %w", err)
	}
	return ca, nil
}

// ConfigDigest identifies a rendered client config (without its generation
// line): a change of digest is a new desired generation.
func ConfigDigest(cfg string) string {
	sum := sha256.Sum256([]byte(cfg))
	return hex.EncodeToString(sum[:])
}

// DesiredDigest is the one digest of a desired generation, whoever records
// it (the delivery reconciler, a rejoin, a change of transport): the main
// config, then each other edge's client (the main config alone with one
// edge, so that a one-edge install's digests are what they were). Two
// writers that hashed differently cost the machine a needless generation.
func DesiredDigest(cfg string, edges []agent.EdgeClient) string {
	var b strings.Builder
	b.WriteString(cfg)
	for _, e := range edges {
		b.WriteString("\n# edge " + e.Edge + "\n")
		b.WriteString(e.Config)
	}
	return ConfigDigest(b.String())
}

// DesiredConfig renders the config machine m should run now, and says
// which tunnel-server address it names: the resolver's answer, else the
// address the machine already uses (when nothing configured names one, a
// machine that joined through the request's own address keeps it).
func (s *Service) DesiredConfig(ctx context.Context, m store.Machine) (cfg, server string, err error) {
	r, err := s.renderer(ctx, m.ID, "")
	if err != nil {
		return "", "", err
	}
	return r.DesiredConfig(ctx, m)
}

// Dial is the one answer to "what does machine m's main client dial":
// every client config (delivered, downloaded, bootstrapped, rejoined, on
// a change of transport) takes its host and port here, and nowhere else.
// On one edge of several: the machine's home edge, whichever edge asks.
// Alone: the resolver's answer, else fallbackHost (the host the machine's
// own request reached the dashboard by; "" for none), else the address
// the machine already uses. An answer that is no hostname or IP address
// is refused before it goes into a config.
func (s *Service) Dial(ctx context.Context, m store.Machine, fallbackHost string) (EdgeTarget, error) {
	es, err := s.edgeTargets(ctx)
	if err != nil {
		return EdgeTarget{}, err
	}
	host := ""
	if es == nil {
		if host, err = s.tunnelHost(ctx, fallbackHost); err != nil {
			return EdgeTarget{}, err
		}
	}
	return s.dial(m, es, host)
}

// dial is Dial's answer from what it read: the cluster's edges (nil for
// one edge) and, for one edge, the resolver's host.
func (s *Service) dial(m store.Machine, es []EdgeTarget, host string) (EdgeTarget, error) {
	var t EdgeTarget
	if es != nil {
		home := HomeOf(m, es)
		if home.Host == "" || home.Port == 0 {
			return EdgeTarget{}, fmt.Errorf("%w (the machine's home edge %s has not said where machines reach it)", reach.ErrNoAddress, home.Name)
		}
		t = EdgeTarget{Host: home.Host, Port: home.Port, TunnelVersion: home.TunnelVersion}
	} else {
		if host == "" {
			host = hostOfServer(m.Config.AppliedServer)
		}
		if host == "" {
			return EdgeTarget{}, reach.ErrNoAddress
		}
		t = EdgeTarget{Host: host, Port: s.FRPSPort, TunnelVersion: s.tunnelVersion()}
	}
	if _, err := validate.Host(t.Host); err != nil {
		return EdgeTarget{}, InputError(fmt.Sprintf("the address machines dial the tunnel server at, %q, is not a hostname or IP address (%v): "+
			"the operator must set --server-host", t.Host, err))
	}
	return t, nil
}

// tunnelHost is where machines dial the tunnel server: the resolver's
// answer, else fallbackHost (the host a request reached the dashboard by;
// "" for none).
func (s *Service) tunnelHost(ctx context.Context, fallbackHost string) (string, error) {
	a, err := s.Reach.Resolve(ctx, &reach.Request{Host: fallbackHost})
	if err != nil {
		return "", fmt.Errorf("read the settings: %w", err)
	}
	return a.TunnelHost, nil
}

// ClientConfig renders a machine's current frpc config (its tunnels
// included) from its sealed secret, dialling where Dial says. fallbackHost
// names the server when nothing configured does ("" for none: then
// reach.ErrNoAddress).
func (s *Service) ClientConfig(ctx context.Context, id int64, fallbackHost string) (string, error) {
	m, err := s.Store.GetMachine(ctx, id)
	if err != nil {
		return "", err
	}
	r, err := s.renderer(ctx, m.ID, fallbackHost)
	if err != nil {
		return "", err
	}
	cfg, _, err := r.DesiredConfig(ctx, m)
	return cfg, err
}

// checkName accepts 1–64 printable characters.
func checkName(field, v string) error {
	if v == "" {
		return InputError(field + " is required")
	}
	if len(v) > 64 {
		return InputError(field + " must be at most 64 characters")
	}
	for _, r := range v {
		if !unicode.IsPrint(r) {
			return InputError(field + " must contain only printable characters")
		}
	}
	return nil
}

// checkUsername accepts a Unix login name.
func checkUsername(v string) error {
	if len(v) > 32 {
		return InputError("username must be at most 32 characters")
	}
	for i, r := range v {
		ok := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') ||
			(i > 0 && (r == '-' || r == '.' || r == '$' || (r >= '0' && r <= '9')))
		if !ok {
			return InputError("username must be a valid login name (letters, digits, '_', '-', '.')")
		}
	}
	return nil
}
