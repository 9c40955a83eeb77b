// Package api is the dashboard's HTTP surface: one route table, the JSON
// envelope, and the middleware that guards it. Handlers call domain packages
// and never reach the OS themselves.
package api

import (
	"context"
	_ "embed"
	"github.com/tunnelsvc/tunnelsvc/daemon/apitokens"
	"github.com/tunnelsvc/tunnelsvc/daemon/sso"

	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/banner"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/edges"
	"github.com/tunnelsvc/tunnelsvc/daemon/firewall"
	"github.com/tunnelsvc/tunnelsvc/daemon/fleet"
	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/logstream"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/netcheck"
	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
	"github.com/tunnelsvc/tunnelsvc/daemon/speedtest"
	"github.com/tunnelsvc/tunnelsvc/daemon/sshkeys"
	"github.com/tunnelsvc/tunnelsvc/daemon/totp"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

//go:embed openapi.yaml
var openAPISpec []byte

// Options are the Server's dependencies. Log and Now default when nil.
type Options struct {
	Config *config.Config
	Auth   *auth.Service
	Audit  *audit.Recorder
	// TOTP is the second factor and step-up check.
	TOTP *totp.Service
	// SSHKeys manages the server's key pairs.
	SSHKeys *sshkeys.Service
	// Machines is the machines, tunnels and bootstrap domain.
	Machines *machines.Service
	// Reach says where machines reach this server: the daemon's one
	// answer, which every handler asks.
	Reach *reach.Resolver
	// Revtunnel renders and deploys the tunnel server's config.
	Revtunnel RevtunnelServer
	// Banner manages the ban tool; Firewall the firewall mode.
	Banner   *banner.Service
	Firewall *firewall.Service
	// Health reports whether the daemon can serve (the store answers), and
	// a *store.FullError while the data disk has no room for writes.
	Health func(*http.Request) error
	// Units drives the allow-listed systemd units; nil means no systemd.
	Units units.Manager
	// Setup is the VPS set-up (install, settings, proxy file).
	Setup *localsetup.Service
	// Net answers the DNS and public-address checks.
	Net *netcheck.Checker
	// Hub carries background operations' log lines to the WebSocket.
	Hub *logstream.Hub
	// Scripts are the machine scripts served under /static.
	Scripts Scripts
	// Agents reaches machines' agents through their agent tunnels; nil
	// answers 503 on the agent routes.
	Agents Agents
	// Fleet updates machines to the server's bundle; nil answers 503 on
	// the update routes.
	Fleet *fleet.Updater
	// Rollouts keeps fleet updates as jobs in the database; set with Fleet.
	Rollouts *fleet.Rollouts
	// SpeedTests runs speed tests through machines' tunnels; nil answers
	// 503 on their routes.
	SpeedTests *speedtest.Service
	// Edges lists the cluster's edges and lets new ones join; nil builds
	// one on the store with this daemon as an edge not yet recorded.
	Edges *edges.Service
	// Prober checks http tunnels through the web proxy; nil answers 503
	// on the probe route.
	Prober Prober
	// Gate issues the one-time codes of operator access to HTTP tunnels;
	// nil answers 404 on its route.
	Gate *gate.Gate
	// Monitoring serves /metrics, the traffic history and the notification
	// settings.
	Monitoring Monitoring
	// SSO signs the operator in through an OpenID provider; nil answers
	// 503 on its routes.
	SSO *sso.Service
	// APITokens keeps the operator's API tokens; nil builds one on the
	// store.
	APITokens *apitokens.Service
	// UI serves everything outside /api and /healthz (the embedded SPA).
	UI  http.Handler
	Log *slog.Logger
	Now func() time.Time
	// Life is the daemon's (nil: none): an operation a request starts in
	// the background (a fleet update, the firewall, the ban tool) outlives
	// the request, but not the daemon.
	Life context.Context
}

// Server holds the handlers' dependencies.
type Server struct {
	cfg       *config.Config
	auth      *auth.Service
	audit     *audit.Recorder
	totp      *totp.Service
	sshkeys   *sshkeys.Service
	machines  *machines.Service
	revtunnel RevtunnelServer
	health    func(*http.Request) error
	units     units.Manager
	ui        http.Handler
	setup     *localsetup.Service
	net       *netcheck.Checker
	hub       *logstream.Hub
	log       *slog.Logger
	now       func() time.Time
	reach     *reach.Resolver
	handler   http.Handler
	banner    *banner.Service
	firewall  *firewall.Service
	scripts   Scripts
	agents    Agents
	prober    Prober
	gate      *gate.Gate
	router    *mux.Router // the route table, for the OpenAPI coverage test
	table     []Route     // each route's method, path and access, as declared
	life      context.Context
	detect    detectCache
	mon       Monitoring
	fleet     *fleet.Updater
	rollouts  *fleet.Rollouts
	edges     *edges.Service
	tokens    *apitokens.Service
	sso       *sso.Service

	// machineList: GET /api/machines's last answer (handlers_machines.go).
	machineList encodedList

	// speedtests runs speed tests (handlers_speedtest.go).
	speedtests *speedtest.Service
}

// New builds the Server and its route table.
func New(o Options) *Server {
	s := &Server{cfg: o.Config, auth: o.Auth, audit: o.Audit, machines: o.Machines, revtunnel: o.Revtunnel, health: o.Health,
		units: o.Units, ui: o.UI, log: o.Log, now: o.Now, setup: o.Setup, net: o.Net, hub: o.Hub,
		banner: o.Banner, firewall: o.Firewall,
		totp: o.TOTP, sshkeys: o.SSHKeys, scripts: o.Scripts, agents: o.Agents, prober: o.Prober,
		gate: o.Gate, reach: o.Reach}
	s.mon = o.Monitoring
	s.fleet = o.Fleet
	s.rollouts = o.Rollouts
	s.speedtests = o.SpeedTests
	s.edges = o.Edges
	s.tokens = o.APITokens
	s.sso = o.SSO
	s.life = o.Life
	if s.life == nil {
		s.life = context.Background()
	}
	if s.tokens == nil && o.Auth != nil {
		s.tokens = &apitokens.Service{Store: o.Auth.Store, Now: o.Now}
	}
	if s.edges == nil && o.Auth != nil && o.Config != nil {
		cfg := o.Config
		s.edges = &edges.Service{Store: o.Auth.Store, Self: func() (int64, string) { return 0, cfg.EdgeName },
			DatabaseURL: cfg.Database, DataDir: cfg.DataDir}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.units == nil {
		s.units = units.Unavailable{}
	}
	if s.ui == nil {
		s.ui = http.NotFoundHandler()
	}
	s.handler = s.routes()
	return s
}

// ServeHTTP serves every request the daemon answers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// h adapts a handlerFunc to http.Handler with the shared error writer.
func (s *Server) h(fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			s.serveError(w, r, err)
		}
	})
}

// OpenAPIDocument is openapi.yaml, the document GET /api/openapi.yaml serves.
func OpenAPIDocument() []byte { return openAPISpec }
