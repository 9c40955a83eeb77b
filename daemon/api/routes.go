package api

import (
	"net/http"
	"strings"

	"github.com/gorilla/mux"
)

// access is who may call a route: the one rule of each route, declared in
// its line of the route table below and enforced by guard, never inside a
// handler. docs/api.md shows the table (make docs).
type access int

const (
	// public: anyone (the login, the machines' own doors, static files).
	public access = iota
	// untilSetup is public while no password is set (the setup wizard
	// needs it) and session after.
	untilSetup
	// operator: the operator's dashboard session, never an API token:
	// identity (API tokens, the password, 2FA, passkeys, SSO) and private
	// keys (generated, uploaded or downloaded).
	operator
	// read: a session, an API token of either scope, or root on this
	// edge through the local socket.
	read
	// write: a session, an API token of scope write, or root on this edge
	// through the local socket.
	write
	// recent: a session that logged in or passed a step-up within
	// auth.RecentAuthWindow ("sudo mode"), never an API token; otherwise
	// 403 "recent authentication required".
	recent
)

// accessNames are the names docs/api.md gives the rules.
var accessNames = map[access]string{
	public:     "anyone",
	untilSetup: "anyone until setup, then a session",
	operator:   "session only",
	read:       "session, API token (read or write) or root on the edge (local socket)",
	write:      "session, API token (write) or root on the edge (local socket)",
	recent:     "session in sudo mode",
}

func (a access) String() string { return accessNames[a] }

// Route is one line of the route table.
type Route struct {
	Method, Path string
	Access       access
}

// routes is the one route table. Every /api route names its method and its
// access; the check is attached here by guard, never inside a handler. The
// UI catch-all comes last and never answers /api paths.
func (s *Server) routes() http.Handler {
	r := mux.NewRouter()
	s.table = s.table[:0]
	api := func(method, path string, a access, fn handlerFunc) {
		s.table = append(s.table, Route{Method: method, Path: path, Access: a})
		r.Handle(path, s.guard(a, s.h(fn))).Methods(method)
	}

	// Liveness for systemd, load balancers and tests: 200 when the store answers.
	r.Handle("/healthz", s.h(s.healthz)).Methods(http.MethodGet, http.MethodHead)

	// Prometheus metrics: not under /api and without a session, for
	// scrapers; the bearer token the operator creates is checked instead.
	r.Handle("/metrics", s.h(s.metricsHandler)).Methods(http.MethodGet)

	// API description (this table, as OpenAPI 3).
	api("GET", "/api/openapi.yaml", public, s.openAPI)

	// Session (spec §4.1, §5).
	api("GET", "/api/auth/status", public, s.authStatus)
	api("POST", "/api/auth/setup", public, s.authSetup)
	api("POST", "/api/auth/login", public, s.authLogin)
	api("POST", "/api/auth/logout", public, s.authLogout)
	// API tokens for automation: Authorization: Bearer on the routes
	// marked read or write; managing them needs the operator's own
	// session, and creating one sudo mode (a stolen session cannot leave
	// a long-lived way in behind it).
	api("GET", "/api/tokens", operator, s.listAPITokens)
	api("POST", "/api/tokens", recent, s.createAPIToken)
	api("DELETE", "/api/tokens/{token_id}", operator, s.revokeAPIToken)
	// Sudo mode: what a step-up needs and until when this session counts
	// as recently authenticated; passing one renews it.
	api("GET", "/api/auth/step-up", operator, s.stepUpStatus)
	api("POST", "/api/auth/step-up", operator, s.stepUp)

	// Two-factor (spec §4.1). The 2FA login is public: it completes a login.
	// Changes to 2FA need a session and, except enroll/confirm, a code;
	// enroll/confirm of an additional device need a recent authentication
	// (checked in the handlers: the first device does not).
	api("POST", "/api/auth/login/2fa", public, s.login2FA)
	api("GET", "/api/auth/2fa/status", operator, s.twoFAStatus)
	api("POST", "/api/auth/2fa/enroll", operator, s.twoFAEnroll)
	api("POST", "/api/auth/2fa/confirm", operator, s.twoFAConfirm)
	api("POST", "/api/auth/2fa/disable", operator, s.twoFADisable)
	api("DELETE", "/api/auth/2fa/devices/{id}", operator, s.twoFARemoveDevice)
	api("DELETE", "/api/auth/2fa/devices/", operator, s.twoFARemoveDevice) // no id: 400
	api("DELETE", "/api/auth/2fa/devices", operator, s.twoFARemoveDevice)  // no id: 400
	api("POST", "/api/auth/2fa/backup-codes/regenerate", operator, s.twoFARegenerate)
	// Passkeys (WebAuthn) are 2FA devices too: registered with a session
	// (an additional device needs a recent sign-in), and answering the
	// login's second step or a step-up instead of a code.
	api("POST", "/api/auth/passkeys/register/begin", operator, s.passkeyRegisterBegin)
	api("POST", "/api/auth/passkeys/register/finish", operator, s.passkeyRegisterFinish)
	api("POST", "/api/auth/login/passkey/begin", public, s.passkeyLoginBegin)
	api("POST", "/api/auth/login/passkey", public, s.passkeyLogin)
	api("POST", "/api/auth/step-up/passkey", operator, s.passkeyStepUpBegin)
	api("PUT", "/api/auth/passkeys/passwordless", recent, s.passkeyPasswordless)
	// Single sign-on through an OpenID provider: its settings (sudo mode
	// to change), and the flow, which answers with redirects.
	api("GET", "/api/auth/sso", operator, s.ssoGet)
	api("PUT", "/api/auth/sso", recent, s.ssoPut)
	api("GET", "/api/auth/sso/start", public, s.ssoStart)
	api("GET", "/api/auth/sso/callback", public, s.ssoCallback)
	api("PUT", "/api/auth/password-login", recent, s.passwordLogin)
	// What the step-up of a key download asks for (spec §4.2, §5.5).
	api("GET", "/api/local/ssh-keys/challenge-info", operator, s.challengeInfo)

	// SSH keys (spec §4.2). Private keys leave only through download, after
	// a step-up check (spec §5.5).
	api("GET", "/api/local/ssh-keys", read, s.sshKeysList)
	api("POST", "/api/local/ssh-keys/generate", operator, s.sshKeysGenerate)
	api("POST", "/api/local/ssh-keys/upload", operator, s.sshKeysUpload)
	api("DELETE", "/api/local/ssh-keys/{id}", write, s.sshKeyDelete)
	api("PUT", "/api/local/ssh-keys/{id}/default", write, s.sshKeySetDefault)
	api("POST", "/api/local/ssh-keys/{id}/download", operator, s.sshKeyDownload)
	// Local set-up and the web proxy (spec §4.2, §4.4).
	api("GET", "/api/local/status", read, s.localStatus)
	// Getting started: what is done and the next step.
	api("GET", "/api/local/checklist", read, s.checklist)
	api("POST", "/api/local/install", write, s.localInstall)
	api("POST", "/api/local/skip", write, s.localSkip)
	api("PUT", "/api/local/server-ports", write, s.localServerPorts)
	api("PUT", "/api/local/bind-ip", write, s.localBindIP)
	// The ACME CA the web proxy gets certificates from (not in the spec).
	api("PUT", "/api/local/acme", write, s.localACME)
	api("GET", "/api/local/resolve-ip", read, s.resolveIP)
	api("GET", "/api/local/check-dns", public, s.checkDNS)
	api("GET", "/api/local/detect-ip", public, s.detectIP)
	api("GET", "/api/debug/webproxyfile", read, s.debugWebproxyFile)
	// Log lines of background operations, as a WebSocket.
	api("GET", "/api/local/logs/ws", read, s.logsWS)

	// Security (spec §4.3).
	api("GET", "/api/security/logs", read, s.securityLogs)
	api("GET", "/api/security/stale-tokens", read, s.staleTokens)

	// Bootstrap and machines (spec §4.5). POST /api/bootstrap is the machines'
	// own door (a one-time token, rate-limited per address); self-delete and
	// rejoin are authenticated by the machine's agent token.
	api("POST", "/api/bootstrap", public, s.bootstrap)

	// Edges: the VPSes of a cluster that share one PostgreSQL database.
	// A new edge joins through POST /api/edges/join with a one-time token.
	api("GET", "/api/edges", read, s.listEdges)
	api("POST", "/api/edges/tokens", recent, s.createEdgeToken)
	api("POST", "/api/edges/join", public, s.joinEdge)
	api("DELETE", "/api/edges/{edge_id}", recent, s.retireEdge)
	api("POST", "/api/bootstrap/tokens", write, s.createBootstrapToken)
	api("GET", "/api/bootstrap/tokens", read, s.listBootstrapTokens)
	api("GET", "/api/bootstrap/tokens/{token_id}", read, s.getBootstrapToken)
	api("DELETE", "/api/bootstrap/tokens/{token_id}", write, s.revokeBootstrapToken)
	api("POST", "/api/machines/self-delete", public, s.selfDelete)
	// A machine already joined runs the join again (a new agent) and keeps
	// its id, name, ports and tunnels: authenticated by its agent token,
	// rate-limited per address like /api/bootstrap.
	api("POST", "/api/machines/rejoin", public, s.rejoin)
	// The machine's own choice of transport (the join falls back to 443 by
	// itself): authenticated and rate-limited as the rejoin is.
	api("POST", "/api/machines/transport", public, s.chooseTransport)
	api("GET", "/api/machines", read, s.listMachines)
	// Fleet updates (issue 26): registered before /api/machines/{machine_id},
	// which would take "update" for an id. Progress goes to the log stream.
	api("POST", "/api/machines/update", write, s.fleetUpdate)
	api("GET", "/api/machines/update", read, s.fleetUpdateStatus)
	api("POST", "/api/machines/{machine_id}/update", write, s.machineUpdate)
	api("GET", "/api/machines/{machine_id}", read, s.getMachine)
	api("PATCH", "/api/machines/{machine_id}", write, s.renameMachine)
	api("DELETE", "/api/machines/{machine_id}", write, s.deleteMachine)
	api("GET", "/api/machines/{machine_id}/revtunnel-client", read, s.machineClientConfig)

	// The machine's agent, reached through its agent tunnel.
	api("GET", "/api/machines/{machine_id}/agent/status", read, s.agentStatus)
	api("POST", "/api/machines/{machine_id}/agent/restart-tunnel", write, s.agentRestartTunnel)
	// Speed tests through the machine's tunnel: started on request (one at
	// a time per machine, never scheduled), followed in the history.
	api("POST", "/api/machines/{machine_id}/speedtest", write, s.startSpeedTest)
	api("GET", "/api/machines/{machine_id}/speedtests", read, s.speedTests)

	// Files machines download (spec §4.5): public, machines have no session.
	// Registered before the SPA catch-all.
	api("GET", "/static/bootstrap.sh", public, s.staticBootstrap)
	api("GET", "/static/tunnel-uninstall.sh", public, s.staticUninstall)
	api("GET", "/static/agents/{file}", public, s.staticBinary("agents"))
	api("GET", "/static/revtunnel/{file}", public, s.staticBinary("revtunnel"))
	// The machine bundle a fleet update installs (and its version), and
	// its unit files and sudo rules alone, which bootstrap.sh installs.
	api("GET", "/static/bundles/{file}", public, s.staticBundle)
	api("GET", "/static/units/{file}", public, s.staticUnit)

	// Tunnels.
	api("GET", "/api/tunnels", read, s.listTunnels)
	api("POST", "/api/tunnels", write, s.createTunnel)
	api("GET", "/api/tunnels/{tunnel_id}", read, s.getTunnel)
	api("PATCH", "/api/tunnels/{tunnel_id}", write, s.updateTunnel)
	// Reachability through the web proxy, now (it is also probed in the
	// background).
	api("POST", "/api/tunnels/{tunnel_id}/probe", write, s.probeTunnel)
	api("GET", "/api/tunnels/{tunnel_id}/dns", read, s.checkTunnelDNS)
	api("DELETE", "/api/tunnels/{tunnel_id}", write, s.deleteTunnel)
	api("GET", "/api/tunnels/{tunnel_id}/bypass-tokens", read, s.listBypassTokens)
	api("POST", "/api/tunnels/{tunnel_id}/bypass-tokens", write, s.createBypassToken)
	api("DELETE", "/api/tunnels/{tunnel_id}/bypass-tokens/{token_id}", write, s.revokeBypassToken)
	api("DELETE", "/api/tunnels/{tunnel_id}/sessions", write, s.endVisitorSessions)
	// Sites as code: the cluster as a file, and a file applied (all or
	// none); the file's JSON Schema is public, for editors.
	api("GET", "/api/export", read, s.exportSite)
	api("POST", "/api/apply", write, s.applySite)
	api("GET", "/api/apply/schema.json", public, s.applySchema)
	// Operator access to a gated tunnel: public, since a browser without a
	// dashboard session is told to sign in first rather than sent a 401.
	api("GET", "/api/gate/authorize", public, s.gateAuthorize)

	// Local operations and activity (spec §4.2).
	api("POST", "/api/local/reconcile", write, s.reconcile)
	api("GET", "/api/local/activity", read, s.activity)

	// Diagnostics (spec §4.4).
	api("GET", "/api/debug/revtunnel-server", read, s.revtunnelServerFile)

	// Units (systemd): the allow-listed units only (revtunnel-server, caddy,
	// fail2ban); 400 for any other name, 503 without systemd.
	api("GET", "/api/units", read, s.unitsList)
	api("GET", "/api/units/{name}", read, s.unitGet)
	api("POST", "/api/units/{name}/start", write, s.unitJob("start"))
	api("POST", "/api/units/{name}/stop", write, s.unitJob("stop"))
	api("POST", "/api/units/{name}/restart", write, s.unitJob("restart"))
	api("POST", "/api/units/{name}/reload", write, s.unitJob("reload"))

	// Ban tool (spec §4.3). Status, config and whitelist read and write our
	// settings and our jail file; unban talks to fail2ban directly.
	api("GET", "/api/security/banner", read, s.bannerStatus)
	api("GET", "/api/security/banner/config", read, s.bannerConfig)
	api("PUT", "/api/security/banner/config", write, s.bannerSetConfig)
	api("POST", "/api/security/banner/unban", write, s.bannerUnban)
	api("POST", "/api/security/banner/whitelist", write, s.bannerWhitelistAdd)
	// {ip} may be a CIDR, so it may contain a slash.
	api("DELETE", "/api/security/banner/whitelist/{ip:.+}", write, s.bannerWhitelistDelete)
	api("DELETE", "/api/security/banner/whitelist/", write, s.bannerWhitelistDelete)
	api("DELETE", "/api/security/banner/whitelist", write, s.bannerWhitelistDelete)
	// Background; progress goes to the log stream.
	api("POST", "/api/local/setup-banner", write, s.setupBanner)

	// Firewall (spec §4.2). detect is public until setup (spec §5.6): the
	// setup wizard shows it before a password exists.
	api("GET", "/api/local/firewall/detect", untilSetup, s.firewallDetect)
	// svc runs in the background; manual and none are saved at once.
	api("POST", "/api/local/firewall/configure", recent, s.firewallConfigure)
	// What svc would open and close, and who could be locked out.
	api("GET", "/api/local/firewall/plan", read, s.firewallPlan)

	// Monitoring: the /metrics token (shown once at creation), traffic
	// history for the charts, and webhook notifications.
	api("GET", "/api/monitoring/metrics-token", read, s.metricsTokenStatus)
	api("POST", "/api/monitoring/metrics-token", recent, s.metricsTokenCreate)
	api("DELETE", "/api/monitoring/metrics-token", operator, s.metricsTokenRevoke)
	api("GET", "/api/monitoring/traffic", read, s.traffic)
	api("GET", "/api/monitoring/notifications", read, s.notifySettings)
	api("PUT", "/api/monitoring/notifications", recent, s.notifySetSettings)
	api("POST", "/api/monitoring/notifications/test", write, s.notifyTest)

	// Unknown API paths and methods answer in the JSON error shape.
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not found")
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
	})

	// The dashboard SPA: everything that is not the API. The API test comes
	// first: a path matcher that matched would make mux forget an earlier
	// method mismatch and answer 404 instead of 405.
	r.MatcherFunc(func(r *http.Request, _ *mux.RouteMatch) bool {
		return !isAPIPath(r.URL.Path)
	}).PathPrefix("/").Handler(s.ui)

	s.router = r
	return s.withClient(crossOrigin(apiOnly(apiHeaders, r)))
}

func isAPIPath(p string) bool { return p == "/api" || strings.HasPrefix(p, "/api/") }

// apiOnly applies mw to /api requests and passes the rest straight to next.
func apiOnly(mw func(http.Handler) http.Handler, next http.Handler) http.Handler {
	wrapped := mw(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isAPIPath(r.URL.Path) {
			wrapped.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
