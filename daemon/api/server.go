// Package api is the dashboard's HTTP surface: one route table, the JSON
// envelope, and the middleware that guards it. Handlers call domain packages
// and never reach the OS themselves.
package api

import (
	_ "embed"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/sshkeys"
	"github.com/tunnelsvc/tunnelsvc/daemon/totp"
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
	// Health reports whether the daemon can serve (the store answers).
	Health func(*http.Request) error
	// UI serves everything outside /api and /healthz (the embedded SPA).
	UI  http.Handler
	Log *slog.Logger
	Now func() time.Time
}

// Server holds the handlers' dependencies.
type Server struct {
	cfg      *config.Config
	auth     *auth.Service
	audit    *audit.Recorder
	totp     *totp.Service
	sshkeys  *sshkeys.Service
	health   func(*http.Request) error
	ui       http.Handler
	log      *slog.Logger
	now      func() time.Time
	baseHost string
	handler  http.Handler
}

// New builds the Server and its route table.
func New(o Options) *Server {
	s := &Server{cfg: o.Config, auth: o.Auth, audit: o.Audit, totp: o.TOTP, sshkeys: o.SSHKeys, health: o.Health, ui: o.UI, log: o.Log, now: o.Now}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if u, err := url.Parse(s.cfg.BaseURL); err == nil {
		s.baseHost = u.Hostname()
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
			serveError(s.log, w, r, err)
		}
	})
}
