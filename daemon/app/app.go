// Package app is the composition root: it opens the store, builds every
// service and the HTTP server, takes the listeners, tells systemd when it is
// ready, and shuts down in order.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/tunnelsvc/tunnelsvc/daemon/agentclient"
	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/banner"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/delivery"
	"github.com/tunnelsvc/tunnelsvc/daemon/edges"
	"github.com/tunnelsvc/tunnelsvc/daemon/firewall"
	"github.com/tunnelsvc/tunnelsvc/daemon/fleet"
	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/health"
	"github.com/tunnelsvc/tunnelsvc/daemon/hostsync"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/logstream"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/monitor"
	"github.com/tunnelsvc/tunnelsvc/daemon/netcheck"
	"github.com/tunnelsvc/tunnelsvc/daemon/notify"
	"github.com/tunnelsvc/tunnelsvc/daemon/probe"
	"github.com/tunnelsvc/tunnelsvc/daemon/publish"
	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/speedtest"
	"github.com/tunnelsvc/tunnelsvc/daemon/sshkeys"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
	"github.com/tunnelsvc/tunnelsvc/daemon/totp"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
	"github.com/tunnelsvc/tunnelsvc/daemon/visitorhop"
	"github.com/tunnelsvc/tunnelsvc/daemon/wakeup"
)

// ShutdownTimeout bounds how long in-flight requests may drain at stop.
const ShutdownTimeout = 10 * time.Second

// ReadTimeout bounds reading one dashboard request, body included.
const ReadTimeout = 20 * time.Second

// App is a running daemon.
type App struct {
	Config *config.Config
	Log    *slog.Logger
	Store  *store.Store
	Auth   *auth.Service
	Audit  *audit.Recorder
	Sealer *seal.Sealer
	TOTP   *totp.Service
	// SSHKeys is the server's key pairs; machine registration calls its
	// EnsureDefault and DefaultPublicKey.
	SSHKeys *sshkeys.Service
	// Units drives the allow-listed systemd units; without systemd every
	// call answers units.ErrUnavailable.
	Units units.Manager
	HTTP  *http.Server
	// Handler is the dashboard's and the API's handler (Serve builds it
	// with the handler builder it is given).
	Handler http.Handler
	// Loops runs the background work; Close stops it.
	Loops *Supervisor

	Machines *machines.Service
	Plugin   *revtunnel.Plugin
	// Bridge carries machines on the wss transport to frps; WSSCert is
	// the certificate the web proxy presents to them.
	Bridge    *revtunnel.Bridge
	WSSCert   *revtunnel.WSSCert
	Revtunnel *revtunnel.Deployer
	// Publish makes public tcp tunnels reachable (frps listens on loopback).
	Publish *publish.Service

	Hub   *logstream.Hub
	Net   *netcheck.Checker
	Setup *localsetup.Service

	// Banner manages fail2ban; Firewall the firewall mode.
	Banner   *banner.Service
	Firewall *firewall.Service
	// Agents reaches machines' tunnel-agents.
	Agents *agentclient.Client
	// Fleet updates machines to the server's bundle and records what
	// their agents report.
	Fleet *fleet.Updater
	// Rollouts runs the fleet updates stored in the database.
	Rollouts *fleet.Rollouts
	// SpeedTests runs speed tests through machines' tunnels.
	SpeedTests *speedtest.Service
	// caRollout brings machines whose frpc does not pin the tunnel CA to
	// a config that does; health checks the targets of shared sites.
	caRollout *agentclient.Rollout
	hostTools cmdrun.Runner // see Deps.HostTools
	// Now is the daemon's clock (Deps.Now).
	Now          func() time.Time
	targetChecks *health.Checker
	// Delivery brings each machine's client config to its desired
	// generation.
	Delivery *delivery.Reconciler
	// follow applies tunnel changes to Caddy, the publish table and the
	// firewall, always the latest state.
	follow *hostsync.Syncer
	// life is the daemon's (New to Close); end ends it.
	life context.Context
	end  context.CancelFunc
	// beatWake and gateWake ask the heartbeat and the gate's reload loops
	// for a turn now.
	beatWake, gateWake wakeup.Signal
	// Notifier sends the webhook notifications; Close waits for it.
	Notifier *notify.Sender
	// Metrics serves /metrics; Tokens are its scrape tokens; Traffic
	// collects what frps counts.
	Metrics http.Handler
	Tokens  *monitor.Tokens
	Traffic *monitor.Traffic
	// Prober checks http tunnels through the web proxy.
	Prober *probe.Prober
	// Gate decides who reaches HTTP tunnels; the web proxy asks it.
	Gate *gate.Gate
	// Hop writes the visitor's address in a PROXY protocol header before
	// the requests of http tunnels that ask for one (a host part).
	Hop *visitorhop.Hop

	// Reach says where machines reach this server; every caller asks it.
	Reach *reach.Resolver

	edge     edgeSelf      // see Edge
	edgeList edgeListCache // see clusterEdges
	frps     *monitor.FRPS // this edge's tunnel server, asked who is connected
	// Edges answers for the cluster's edges.
	Edges *edges.Service

	exposureSnap store.Snapshot[machines.Exposure] // see exposure
	reachSnap    store.Snapshot[reach.Settings]    // see Services
}

// Services builds everything that needs only the store, for the serve path
// and for root's offline commands (reset-password) alike.
func Services(ctx context.Context, cfg *config.Config, log *slog.Logger) (*App, error) {
	return services(ctx, cfg, log, time.Now)
}

// services is Services on the clock now.
func services(ctx context.Context, cfg *config.Config, log *slog.Logger, now func() time.Time) (*App, error) {
	st, err := openStore(ctx, cfg.DataDir, cfg.Database)
	if store.DiskFull(err) {
		return nil, fmt.Errorf("open %s: the data disk is full: free space on it, then start again: %w", describeStore(cfg), err)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", describeStore(cfg), err)
	}
	sealer, err := seal.LoadOrCreate(cfg.DataDir)
	if err != nil {
		st.Close()
		return nil, err
	}
	rec := &audit.Recorder{Store: st, Log: log, Now: now}
	a := &App{Config: cfg, Log: log, Store: st, Audit: rec, Sealer: sealer, Now: now}
	a.Auth = &auth.Service{
		Store: st, Log: log, Audit: rec, DataDir: cfg.DataDir, Now: now,
		Sessions: &auth.Sessions{Store: st, Now: now},
		Limiter:  auth.NewLimiter(now),
		// Two-factor sign-in, built next from this service.
		SecondFactor: secondFactor{a},
	}
	a.Auth.Limiter.Log = log
	if st.Engine() == "postgres" {
		// Edges of a cluster count each other's failures.
		a.Auth.Limiter.Shared = clusterFailures{store: st, edge: cfg.EdgeName}
	}
	a.TOTP = totp.New(totp.Options{Store: st, Sealer: sealer, Auth: a.Auth, Audit: rec, Log: log, Now: now})
	if err := a.Auth.LoadKnown(ctx, audit.Setup, audit.LoginSuccess, totp.KindLoginSuccess); err != nil {
		log.Warn("could not read the addresses of earlier logins", "err", err)
	}
	a.SSHKeys = sshkeys.New(sshkeys.Options{Store: st, Sealer: sealer, Audit: rec, Log: log, Now: now})
	// Asked at every use, read from the store between two writes.
	settings := localsetup.Settings{Store: st, Edge: cfg.EdgeName}
	a.Reach = &reach.Resolver{BaseURL: cfg.BaseURL, ServerHost: cfg.ServerHost,
		Settings: func(ctx context.Context) (reach.Settings, error) {
			return a.reachSnap.Get(st, func() (reach.Settings, error) { return settings.Reach(ctx) })
		}}
	return a, nil
}

// Names of the sockets systemd passes (FileDescriptorName= in the socket
// units): the dashboard's (tunnelsvc.socket) and frps's plugin callbacks'
// (tunnelsvc-plugin.socket).
const (
	SocketDashboard = "dashboard"
	SocketPlugin    = "frps-plugin"
	SocketGate      = "gate"
	SocketLocal     = "local"
)

// Listeners are the daemon's sockets.
type Listeners struct {
	// Dashboard serves the dashboard and the API (at least one).
	Dashboard []net.Listener
	// Plugin serves frps's plugin calls.
	Plugin net.Listener
	// Gate serves the web proxy's access checks.
	Gate net.Listener
	// Local serves the API to root on this edge (a Unix socket); nil, with
	// LocalErr saying why, when it could not be opened.
	Local    net.Listener
	LocalErr error
}

// TakeListeners returns the sockets systemd passed, picked by name, and
// listens itself on cfg.Listen, cfg.PluginListen or cfg.GateListen for any
// that systemd did not pass (no socket activation at all, as in `make run`,
// or a socket the operator disabled). A passed socket of any other name is a
// dashboard socket.
func TakeListeners(cfg *config.Config) (*Listeners, error) {
	named, err := activation.ListenersWithNames()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	ls := &Listeners{}
	for name, group := range named {
		for _, l := range group {
			switch {
			case l == nil:
			case name == SocketPlugin && ls.Plugin == nil:
				ls.Plugin = l
			case name == SocketPlugin:
				l.Close()
			case name == SocketGate && ls.Gate == nil:
				ls.Gate = l
			case name == SocketGate:
				l.Close()
			case name == SocketLocal && ls.Local == nil:
				ls.Local = l
			case name == SocketLocal:
				l.Close()
			default:
				ls.Dashboard = append(ls.Dashboard, l)
			}
		}
	}
	if len(ls.Dashboard) == 0 {
		l, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			ls.close()
			return nil, err
		}
		ls.Dashboard = []net.Listener{l}
	}
	if ls.Plugin == nil {
		l, err := net.Listen("tcp", cfg.PluginListen)
		if err != nil {
			ls.close()
			return nil, fmt.Errorf("frps plugin listener: %w", err)
		}
		ls.Plugin = l
	}
	if ls.Gate == nil {
		l, err := net.Listen("tcp", cfg.GateListen)
		if err != nil {
			ls.close()
			return nil, fmt.Errorf("access gate listener: %w", err)
		}
		ls.Gate = l
	}
	if ls.Local == nil {
		// Without it the daemon still serves; Serve says why it is missing.
		ls.Local, ls.LocalErr = listenLocal(cfg.LocalSocket)
	}
	return ls, nil
}

func (ls *Listeners) close() {
	for _, l := range ls.Dashboard {
		l.Close()
	}
	if ls.Plugin != nil {
		ls.Plugin.Close()
	}
	if ls.Gate != nil {
		ls.Gate.Close()
	}
	if ls.Local != nil {
		ls.Local.Close()
	}
}

// Deps are what New takes from the process around it.
type Deps struct {
	// Units drives systemd units (nil: no systemd).
	Units units.Manager
	// Dashboard is the dashboard listener's address (nil: none yet); the
	// web proxy and the firewall follow it.
	Dashboard net.Addr
	// Now is the daemon's clock (nil: time.Now).
	Now func() time.Time
	// HostTools runs the host's tools the daemon drives (nft and sysctl
	// for the publish table and the firewall, fail2ban-client for the ban
	// tool); nil: on this machine.
	HostTools cmdrun.Runner
	// Minute is how long a minute of the notification watcher's delays
	// lasts, its checks coming as much sooner (0: a minute); the tests of
	// an offline notice shorten it.
	Minute time.Duration
	// Serving, when set, is told the daemon Serve built once it serves
	// (the end-to-end tests drive it through its parts).
	Serving func(*App)
}

// New builds the whole daemon, every service wired as it serves, without
// listening or starting anything: main's Serve and the tests build it the
// same way. Start the background work with a.Loops.Start; Close stops it
// and closes the store.
func New(ctx context.Context, cfg *config.Config, log *slog.Logger, deps Deps) (*App, error) {
	now := deps.Now
	if now == nil {
		now = time.Now
	}
	a, err := services(ctx, cfg, log, now)
	if err != nil {
		return nil, err
	}
	// Without systemd every unit operation says so (503), as Serve's
	// D-Bus manager does when systemd is not the init system.
	// The daemon's life: what runs in the background outside a request
	// runs under it, and Close ends it.
	a.life, a.end = context.WithCancel(context.WithoutCancel(ctx))
	a.Units = deps.Units
	if a.Units == nil {
		a.Units = units.Unavailable{}
	}
	a.Loops = &Supervisor{Log: log}
	a.hostTools = deps.HostTools
	if a.hostTools == nil {
		a.hostTools = cmdrun.Exec{}
	}
	var restarter revtunnel.UnitRestarter = a.Units
	// Registration hands out the default key's public half, generating an
	// ed25519 default at the first registration when no key exists.
	a.tunnelServices(a.SSHKeys, restarter)
	a.guardServices(deps.Dashboard)
	a.setupServices(deps.Dashboard)
	a.agentServices()
	a.speedTestService()
	a.probeServices()
	// This edge's own host (the tunnel server's config, Caddy, the publish
	// table, the firewall) is kept as the database says: a change heard of
	// makes the next pass sooner, and a pass runs every 30 s regardless.
	a.Hop = &visitorhop.Hop{Log: log}
	a.follow = &hostsync.Syncer{Edge: cfg.EdgeName, Parts: a.hostParts(), Record: hostRecorder{a.Store}, Log: log}
	if err := a.gateServices(ctx); err != nil {
		a.Store.Close()
		return nil, err
	}
	// One place decides who follows a change of tunnels: the access gate
	// at once (a new password ends old sessions before the API answers),
	// then, in the background, Caddy, the publish table, the firewall and
	// the prober. Client configs follow through the delivery reconciler,
	// which hears of every write (below).
	a.Edges = &edges.Service{Store: a.Store, Self: a.Edge, DatabaseURL: cfg.Database, DataDir: cfg.DataDir}
	// A change made here and one another edge made are reacted to alike.
	a.Store.OnChange(a.changed)
	a.Store.OnRemoteLog(func(msg string) {
		var m logstream.Message
		if json.Unmarshal([]byte(msg), &m) == nil {
			a.Hub.Deliver(m)
		}
	})
	// What another edge changed: its dashboards hear it, and this edge
	// applies it to its own gate and host within a moment, as if made here.
	a.Store.OnRemoteChange(a.changed)
	if err := a.monitoringServices(ctx, deps.Minute); err != nil {
		a.Store.Close()
		return nil, err
	}
	// The first beat now, so that the frps plugin records machines under
	// this edge from the first Login; the loop retries when it fails.
	if err := a.beat(ctx); err != nil {
		a.Log.Warn("could not record this edge's heartbeat", "edge", cfg.EdgeName, "err", err)
	}
	// Host settings saved cluster-wide before they were each edge's own
	// move to the edge that set them (the oldest); read as its until then.
	if err := a.settings().AdoptHostSettings(ctx); err != nil {
		a.Log.Warn("could not move the host settings to this edge's own", "edge", cfg.EdgeName, "err", err)
	}
	a.loops()
	return a, nil
}

// loops adds the daemon's background work to its supervisor (started by
// Loops.Start).
func (a *App) loops() {
	a.Loops.Loop("edge heartbeat", a.heartbeat)
	// Versions of machines not heard from in 10 minutes, one at a time.
	a.Loops.Loop("machine versions", func(ctx context.Context) error { a.Fleet.Refresh(ctx, 10*time.Minute); return nil })
	a.Loops.Loop("client config delivery", a.Delivery.Run)
	a.Loops.Loop("machines' last seen", a.Plugin.RunSeen)
	a.Loops.Loop("fleet updates", func(ctx context.Context) error { a.Rollouts.Run(ctx); return nil })
	a.Loops.Loop("this edge's host (tunnel server, web proxy, publish table, firewall)", a.follow.Run)
	a.Loops.Loop("tunnel prober", func(ctx context.Context) error { a.Prober.Run(ctx); return nil })
	a.Loops.Loop("access gate reload", a.reloadGate)
	a.Loops.Loop("frps certificate renewal", a.renewCertificates)
	a.Loops.Loop("retention", func(ctx context.Context) error { a.pruneLoop(ctx); return nil })
}

// changed is the one reaction to a change of the database, whether this
// edge made it or another edge did: the dashboards hear of it, the
// machines' configs, the access gate, this edge's host and the prober
// follow, and the heartbeat says this edge's address anew after a
// settings change. Every reaction is a notice to a loop that reconciles
// anyway: nothing here blocks or starts work of its own.
func (a *App) changed(topic string) {
	if topic == store.TopicTunnelStatus {
		// Shown, not rendered: the dashboard fetches the tunnels again,
		// and the prober looks at the tunnel that came up or went down.
		a.Hub.Notify(store.TopicTunnels)
		a.Prober.KickStatus()
		return
	}
	if topic == store.TopicEdges {
		a.edgeList.forget()
	}
	a.Hub.Notify(topic)
	a.Delivery.Changed(topic)
	switch topic {
	case store.TopicRollouts:
		a.Rollouts.Wake()
	case store.TopicSettings:
		// The address this edge gives the others may have changed.
		a.beatWake.Notify()
		fallthrough
	case store.TopicTunnels, store.TopicEdges:
		a.gateWake.Notify()
		a.follow.Poke()
		a.Prober.Kick()
	}
}

// gateReloadTimeout bounds a reload of the access gate after a change.
const gateReloadTimeout = 10 * time.Second

// waitUntil waits for wait to return, until deadline at most; past it,
// it logs late and goes on.
func (a *App) waitUntil(deadline time.Time, wait func(), late string) {
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		a.Log.Warn(late)
	}
}

// Close ends the daemon's life: the background work stops (the loops,
// and webhook deliveries waiting to try again), then the store closes.
// Deliveries and speed tests under way get ShutdownTimeout to end.
func (a *App) Close() {
	if a.end != nil {
		a.end()
	}
	if a.Hop != nil {
		a.Hop.Close()
	}
	if a.Loops != nil {
		a.Loops.Stop()
	}
	// The daemon's life has ended: webhook deliveries and the operation
	// running here (an install, a firewall takeover...) stop or finish;
	// they are waited for, ShutdownTimeout at most in all.
	deadline := time.Now().Add(ShutdownTimeout)
	if a.Notifier != nil {
		a.waitUntil(deadline, a.Notifier.Wait, "webhook deliveries still under way at shutdown were cut short")
	}
	if a.SpeedTests != nil {
		a.waitUntil(deadline, a.SpeedTests.Wait, "a speed test still running at shutdown was cut short")
	}
	if a.Hub != nil {
		for op, running := a.Hub.Running(); running; op, running = a.Hub.Running() {
			if time.Now().After(deadline) {
				a.Log.Warn("an operation still running at shutdown was cut short", "operation", op)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	a.Store.Close()
}

// gateNow is the machines service's change hook: the access gate reloads
// before the API answers, so a new password or access mode is enforced
// when the operator sees it saved. Everything else that follows a tunnel
// change (this edge's host, the prober, other edges, open dashboards)
// hears it from the store's announcement, in changed.
func (a *App) gateNow(int64) {
	ctx, cancel := context.WithTimeout(a.life, gateReloadTimeout)
	defer cancel()
	if err := a.Gate.Reload(ctx); err != nil {
		a.Log.Error("the access gate could not reload the tunnels", "err", err)
	}
}

// Serve runs the daemon until ctx is cancelled, then stops in order: HTTP
// server (draining requests), the background loops, then the store.
// deps are the process's edges (systemd over D-Bus in tunnelsvc serve;
// stand-ins in the chaos figure's edges and the end-to-end tests; the
// dashboard's address comes from its listener); handler builds the
// dashboard's and the API's handler from the daemon (api.ForDaemon).
func Serve(ctx context.Context, cfg *config.Config, log *slog.Logger, deps Deps, handler func(*App) http.Handler) error {
	lis, err := TakeListeners(cfg)
	if err != nil {
		daemon.SdNotify(false, "STATUS=start failed: "+err.Error())
		return err
	}
	// The Caddyfile names the gate's real address (with --gate-listen
	// 127.0.0.1:0 the kernel picks the port).
	cfg.GateListen = lis.Gate.Addr().String()
	ls := lis.Dashboard
	deps.Dashboard = ls[0].Addr()
	a, err := New(ctx, cfg, log, deps)
	if err != nil {
		lis.close()
		daemon.SdNotify(false, "STATUS=start failed: "+err.Error())
		return err
	}
	// Last of all: the daemon's life ends, its loops, webhook deliveries
	// and operation stop (waited for), then the store closes.
	defer a.Close()
	a.Handler = handler(a)
	if err := a.announceSetupCode(ctx); err != nil {
		return err
	}
	// In svc mode our table is put back at every start (it does not survive
	// a reboot by itself).
	if err := a.Firewall.Reconcile(ctx); err != nil {
		log.Error("firewall: could not restore table inet tunnelsvc", "err", err)
	}
	a.HTTP = &http.Server{
		Handler: a.Handler,
		// Bodies are small (api.MaxBodyBytes); a client that trickles one
		// is cut off. The log WebSocket lifts the deadline after upgrading.
		ReadTimeout:       ReadTimeout,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	// frps's plugin calls arrive on their own loopback listener, never on
	// the dashboard's; with systemd it is held by tunnelsvc-plugin.socket,
	// so frps's first call after a boot starts the daemon.
	plugin := serveOn("frps plugin", a.pluginServer(), nil, lis.Plugin)
	log.Info("serving frps plugin calls", "addr", lis.Plugin.Addr().String())
	gate := serveOn("access gate", a.gateServer(), nil, lis.Gate)
	log.Info("serving the access gate", "addr", lis.Gate.Addr().String())
	local := a.serveLocal(cfg, lis)
	// Our publish table does not survive a reboot: put it back.
	if err := a.Publish.Reconcile(ctx); err != nil {
		log.Error("public tcp tunnels could not be published", "err", err)
	}
	a.Loops.Loop("systemd watchdog", func(ctx context.Context) error { a.watchdog(ctx); <-ctx.Done(); return nil })
	a.Loops.Start(ctx)
	errc := make(chan error, len(ls))
	dashboard := serveOn("dashboard", a.HTTP, errc, ls...)
	for _, l := range ls {
		log.Info("serving the dashboard", "addr", l.Addr().String())
	}
	// The store is open and migrated and the listeners are serving.
	daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS=serving")
	if deps.Serving != nil {
		deps.Serving(a)
	}

	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			daemon.SdNotify(false, "STATUS=serve failed: "+err.Error())
			return err
		}
	}
	daemon.SdNotify(false, daemon.SdNotifyStopping+"\nSTATUS=stopping")
	log.Info("stopping: draining requests")
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	// All three, side by side within one bound: a visitor's gate check or
	// a machine's login that frps forwards meanwhile is answered too.
	stopAll(sctx, log, dashboard, plugin, gate, local)
	log.Info("stopped")
	return nil
}

// Life is the daemon's life: work outside a request runs under it, and
// Close ends it.
func (a *App) Life() context.Context { return a.life }

// Healthz is /healthz's check: the store answers a read, and its disk takes
// writes (a *store.FullError while it does not).
func (a *App) Healthz(r *http.Request) error {
	if err := a.Store.Ping(r.Context()); err != nil {
		return err
	}
	return a.Store.Writable()
}

// announceSetupCode logs the one-time setup code while no password is set, so
// root can read it from the journal (or with `tunnelsvc setup-code`).
func (a *App) announceSetupCode(ctx context.Context) error {
	configured, err := a.Auth.Configured(ctx)
	if err != nil || configured {
		return err
	}
	code, created, err := auth.LoadOrCreateSetupCode(a.Config.DataDir)
	if err != nil {
		return fmt.Errorf("setup code: %w", err)
	}
	a.Log.Info("not set up yet: finish setup in the dashboard; from a remote address send this one-time code in X-Setup-Code",
		"setup_code", code, "new", created)
	return nil
}

// watchdog pings systemd at half of WatchdogSec for as long as the store
// is live (store.Live), so a daemon whose SQLite file is wedged gets
// restarted rather than kept alive by a goroutine that still ticks. A
// PostgreSQL server that is away does not stop the pings: the daemon keeps
// serving tunnels and gates from memory meanwhile, and a restart would
// neither bring the server back nor start without it. Silent without a
// watchdog.
func (a *App) watchdog(ctx context.Context) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		a.Log.Warn("watchdog settings unreadable; not pinging", "err", err)
		return
	}
	if interval <= 0 {
		return
	}
	every := interval / 2
	a.Log.Info("pinging the systemd watchdog", "every", every.String())
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, every/2)
		err := a.Store.Live(pctx)
		cancel()
		if err != nil {
			a.Log.Warn("store does not answer; skipping the watchdog ping", "err", err)
			continue
		}
		daemon.SdNotify(false, daemon.SdNotifyWatchdog)
	}
}

// secondFactor is the login's two-factor provider: TOTP, which is built
// from the auth service and so after it.
type secondFactor struct{ a *App }

func (f secondFactor) Enabled(ctx context.Context) (bool, error) { return f.a.TOTP.Enabled(ctx) }
func (f secondFactor) BeginPending(ctx context.Context, c auth.Client) (string, error) {
	return f.a.TOTP.BeginPending(ctx, c)
}

// NewLogger is the daemon's and its commands' log at level (debug, info,
// warn, error), as text to w.
func NewLogger(level string, w io.Writer) *slog.Logger {
	var l slog.Level
	l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}
