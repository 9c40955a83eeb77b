// Package agent is tunnel-agent, the small HTTP service on each machine that
// lets the control server look after the machine's tunnel client without a
// person on the machine: status, restart, a new client config, uninstall.
//
// It listens on 127.0.0.1 only; the control server reaches it through the
// machine's own `agent` tunnel. Every request is signed with the agent token,
// which never crosses the wire, and every answer is signed back (sign.go);
// anything else is 401.
//
// The agent runs as the unprivileged user `tunnel`. What needs root goes
// through sudo rules that allow exactly these commands (bootstrap.sh writes
// them): `systemctl restart revtunnel-client.service`,
// `tunnel-agent apply-config` (verify, write, reload a config read from
// stdin), `tunnel-agent apply-update` and `tunnel-agent confirm-update`
// (install a machine bundle with a rollback armed, then disarm it; see
// update.go) and `tunnel-uninstall --detach`.
package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// MaxConfigBytes caps a pushed client config.
const MaxConfigBytes = 256 << 10

// System is what the agent does to the machine. Production runs commands
// (see Commands); tests use a fake.
type System interface {
	// UnitState returns systemd's properties of the tunnel client unit:
	// ActiveState, SubState and ActiveEnterTimestampMonotonic (µs).
	UnitState(ctx context.Context) (map[string]string, error)
	// Restart restarts the tunnel client unit.
	Restart(ctx context.Context) error
	// ApplyConfig checks, installs and reloads a client config. A refused
	// config must leave the installed one untouched.
	ApplyConfig(ctx context.Context, config []byte) error
	// ClientVersion is the tunnel client's version.
	ClientVersion(ctx context.Context) (string, error)
	// Uptime is the machine's monotonic clock, to age the unit's start.
	Monotonic() (time.Duration, error)
	// Uninstall starts the uninstall script (detached: it stops this agent).
	Uninstall(ctx context.Context) error
}

// Server is the agent's HTTP handler.
type Server struct {
	Token   string
	Unit    string
	Version string
	Sys     System
	Log     *slog.Logger
	// Timeout bounds each operation (default 30 s).
	Timeout time.Duration
	// Later runs f after the answer went out (default: 500 ms later, in
	// the background). Tests run it at once.
	Later func(f func())
	// Now is the clock challenges age by (default time.Now).
	Now func() time.Time
	// Lib is where root keeps bundle-version and update-state (default
	// LibDir).
	Lib string
	// HTTPClient downloads bundles (default http.DefaultClient: the
	// system's roots).
	HTTPClient *http.Client
	// DownloadTimeout bounds a bundle's download (default DownloadTimeout).
	DownloadTimeout time.Duration
	// TempDir holds a bundle while it is checked and applied (default
	// os.TempDir(), private to the agent's unit).
	TempDir string

	upd updater

	challenges challenges
	// applied is the generation of the config this agent last applied
	// (0: none since it started).
	applied atomic.Int64
}

func (s *Server) later(f func()) {
	if s.Later != nil {
		s.Later(f)
		return
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		f()
	}()
}

// Status is GET /status's answer.
type Status struct {
	Unit          string `json:"unit"`
	ActiveState   string `json:"active_state"`
	SubState      string `json:"sub_state"`
	UptimeSeconds int64  `json:"uptime_seconds"`
	AgentVersion  string `json:"agent_version"`
	ClientVersion string `json:"revtunnel_client_version"`
	// ConfigGeneration is the generation of the client config this agent
	// last applied; absent when it applied none since it started.
	ConfigGeneration int64 `json:"config_generation,omitempty"`
	// Capabilities lists what this agent can do beyond the routes every
	// agent has: "update" (POST /update, POST /update/confirm),
	// "speedtest" (the /speedtest/ routes, speedtest.go), and those of
	// clients.go.
	Capabilities []string `json:"capabilities"`
	// Arch is the machine's architecture as bundles name it (GOARCH).
	Arch string `json:"arch"`
	// BundleVersion is the installed machine bundle (the agent's own
	// version on a machine not updated since it was bootstrapped).
	BundleVersion string `json:"bundle_version"`
	// Update is the last update; absent when none ever ran here.
	Update *UpdateState `json:"update,omitempty"`
}

// ConfigAnswer is PUT /config's answer.
type ConfigAnswer struct {
	Message string `json:"message"`
	// Generation is the applied config's generation (absent when its
	// first line names none).
	Generation int64 `json:"generation,omitempty"`
}

// ToolError is a failure whose text is the tool's own words.
type ToolError struct {
	Op     string
	Output string
	Err    error
}

func (e *ToolError) Error() string {
	out := strings.TrimSpace(e.Output)
	if out == "" {
		return fmt.Sprintf("%s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Op, out)
}

func (e *ToolError) Unwrap() error { return e.Err }

// ErrRefused marks a config the tunnel client refused (a 400, not a 500).
var ErrRefused = errors.New("config refused")

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// ServeHTTP answers GET /challenge, or checks a request's signature (see
// sign.go), then routes it and signs the answer.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := s.now()
	if r.URL.Path == "/challenge" && r.Method == http.MethodGet {
		nonce := r.Header.Get(HeaderNonce)
		if !ValidNonce(nonce) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": HeaderNonce + " must be 32 lowercase hex digits"})
			return
		}
		rec := newBuffered()
		writeJSON(rec, http.StatusOK, map[string]string{"challenge": s.challenges.issue(now)})
		s.reply(w, nonce, rec)
		return
	}
	if r.URL.Path == PathSpeedDownload || r.URL.Path == PathSpeedUpload {
		s.serveStream(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxConfigBytes+1))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "could not read the request: " + err.Error()})
		return
	}
	if len(body) > MaxConfigBytes {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("body larger than %d bytes", MaxConfigBytes)})
		return
	}
	nonce := r.Header.Get(HeaderNonce)
	sig := r.Header.Get(HeaderSignature)
	if s.Token == "" || !ValidNonce(nonce) || !SignatureOK(sig, RequestSignature(s.Token, r.Method, r.URL.RequestURI(), body, r.Header.Get(HeaderChallenge), nonce)) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "a request signed with the agent token is required (GET /challenge, then " +
			HeaderChallenge + ", " + HeaderNonce + " and " + HeaderSignature + ")"})
		return
	}
	rec := newBuffered()
	// The signature is good: whoever sent it knows the token or replays a
	// request of the daemon. A used or stale challenge tells them apart.
	if err := s.challenges.redeem(r.Header.Get(HeaderChallenge), now); err != nil {
		writeJSON(rec, http.StatusUnauthorized, map[string]string{"error": err.Error()})
	} else {
		s.route(rec, r, body)
	}
	s.reply(w, nonce, rec)
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// reply writes rec's answer, signed for the request that carried nonce.
func (s *Server) reply(w http.ResponseWriter, nonce string, rec *buffered) {
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.Header().Set(HeaderSignature, ResponseSignature(s.Token, nonce, rec.status, rec.body.Bytes()))
	w.WriteHeader(rec.status)
	w.Write(rec.body.Bytes())
}

// buffered holds an answer until it is signed.
type buffered struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newBuffered() *buffered { return &buffered{header: http.Header{}, status: http.StatusOK} }

func (b *buffered) Header() http.Header         { return b.header }
func (b *buffered) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *buffered) WriteHeader(status int)      { b.status = status }

func (s *Server) route(w http.ResponseWriter, r *http.Request, body []byte) {
	timeout := s.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	route := r.Method + " " + r.URL.Path
	switch route {
	case "GET /status":
		s.status(ctx, w)
	case "POST /restart":
		// This request arrives through the tunnel client being restarted:
		// answer first, then restart, or the answer dies with the tunnel.
		writeJSON(w, http.StatusAccepted, map[string]string{"message": s.Unit + " restart started; the tunnel reconnects in a few seconds"})
		s.later(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			if err := s.Sys.Restart(ctx); err != nil {
				s.log().Error("restart "+s.Unit+" failed", "err", err)
				return
			}
			s.log().Info(s.Unit + " restarted")
		})
	case "PUT /config":
		s.putConfig(ctx, w, body)
	case "PUT /clients":
		s.putClients(ctx, w, body)
	case "POST /update":
		// Answers at once; the download and the install go on in the
		// background and GET /status tells how they went.
		s.postUpdate(w, body)
	case "POST /update/confirm":
		s.confirmUpdate(ctx, w, body)
	case "POST " + PathSpeedMTU:
		s.speedMTU(w, body)
	case "POST /uninstall":
		if err := s.Sys.Uninstall(ctx); err != nil {
			s.fail(w, "uninstall", err)
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"message": "uninstall started; this agent stops with it"})
	default:
		switch r.URL.Path {
		case "/status", "/restart", "/config", "/clients", "/uninstall", "/challenge", "/update", "/update/confirm", PathSpeedMTU:
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
		default:
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found"})
		}
	}
}

func (s *Server) status(ctx context.Context, w http.ResponseWriter) {
	props, err := s.Sys.UnitState(ctx)
	if err != nil {
		s.fail(w, "read the state of "+s.Unit, err)
		return
	}
	st := Status{Unit: s.Unit, ActiveState: props["ActiveState"], SubState: props["SubState"], AgentVersion: s.Version,
		ConfigGeneration: s.applied.Load(), Capabilities: []string{}, Arch: runtime.GOARCH,
		BundleVersion: readBundleVersion(s.lib(), s.Version)}
	if _, ok := s.updates(); ok {
		st.Capabilities = append(st.Capabilities, "update")
	}
	if _, ok := s.Sys.(ClientSetter); ok {
		st.Capabilities = append(st.Capabilities, ClientsCapability, ReconnectCapability)
	}
	st.Capabilities = append(st.Capabilities, SpeedTestCapability)
	file, haveFile := readUpdateState(s.lib())
	st.Update = s.upd.current(file, haveFile)
	if st.ActiveState == "active" {
		if since, err := strconv.ParseInt(props["ActiveEnterTimestampMonotonic"], 10, 64); err == nil && since > 0 {
			if now, err := s.Sys.Monotonic(); err == nil && now > time.Duration(since)*time.Microsecond {
				st.UptimeSeconds = int64((now - time.Duration(since)*time.Microsecond) / time.Second)
			}
		}
	}
	if v, err := s.Sys.ClientVersion(ctx); err == nil {
		st.ClientVersion = v
	} else {
		st.ClientVersion = "unknown (" + err.Error() + ")"
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) putConfig(ctx context.Context, w http.ResponseWriter, body []byte) {
	if strings.TrimSpace(string(body)) == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "empty config; the installed one is kept"})
		return
	}
	if err := s.Sys.ApplyConfig(ctx, body); err != nil {
		if errors.Is(err, ErrRefused) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error() + "; the installed config is kept"})
			return
		}
		s.fail(w, "apply the config", err)
		return
	}
	ans := ConfigAnswer{Message: "config installed and " + s.Unit + " reloaded"}
	if gen, ok := Generation(body); ok {
		s.applied.Store(gen)
		ans.Generation = gen
		ans.Message = "config generation " + strconv.FormatInt(gen, 10) + " installed and " + s.Unit + " reloaded"
	}
	writeJSON(w, http.StatusOK, ans)
}

func (s *Server) fail(w http.ResponseWriter, what string, err error) {
	s.log().Error(what+" failed", "err", err)
	writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "could not " + what + ": " + err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
