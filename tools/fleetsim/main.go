// Command fleetsim runs a fleet of machines in one process, each made of
// the parts a real machine runs: frp's own client package (the pinned
// frpc, in-process) started from the config the daemon gave the machine at
// its bootstrap, and the real agent's handler (daemon/agent) answering the
// daemon through the machine's agent tunnel. Under the agent, a System
// applies each delivered config to that in-process client as `frpc reload`
// would (a restart when its common section changed), and a client that
// exits is started again 5 s later, as bootstrap.sh's unit has systemd do.
// Deliveries, generations, logins, pings and proxies are therefore all
// real; only the machine's services are stand-ins, served on the work
// connections themselves (an SSH banner; a web app that names its machine).
//
// It reads the machines' registrations (POST /api/bootstrap's answers) as
// a JSON array from --machines, and serves its own state on --control:
// GET /state gives each machine's applied generation and how many of its
// clients are logged in.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	frplog "github.com/fatedier/frp/pkg/util/log"
)

// Registration is one machine: its name and what POST /api/bootstrap
// answered it.
type Registration struct {
	Name         string `json:"name"`
	ClientConfig string `json:"revtunnel_client_config"`
	AgentToken   string `json:"agent_token"`
}

func main() {
	machinesFile := flag.String("machines", "", "the machines' registrations (a JSON array)")
	control := flag.String("control", "127.0.0.1:0", "where to serve GET /state")
	dir := flag.String("dir", os.TempDir(), "where to keep the tunnel CA the configs name")
	startRate := flag.Int("start-rate", 500, "clients started per second at first (a fleet does not boot in one instant)")
	flag.Parse()
	frplog.InitLogger("console", "error", 0, true)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	b, err := os.ReadFile(*machinesFile)
	if err != nil {
		fatal(err)
	}
	var regs []Registration
	if err := json.Unmarshal(b, &regs); err != nil {
		fatal(fmt.Errorf("%s: %w", *machinesFile, err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	f := &fleet{dir: *dir, log: log, start: time.Now()}
	f.serveWork()
	l, err := net.Listen("tcp", *control)
	if err != nil {
		fatal(err)
	}
	go http.Serve(l, http.HandlerFunc(f.state))
	// The bench reads the control address from the first line.
	fmt.Printf("control %s\n", l.Addr())
	tick := time.NewTicker(time.Second / time.Duration(max(*startRate, 1)))
	for _, r := range regs {
		m, err := f.add(r)
		if err != nil {
			fatal(fmt.Errorf("machine %s: %w", r.Name, err))
		}
		go m.run(ctx)
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
	tick.Stop()
	fmt.Printf("started %d\n", len(regs))
	<-ctx.Done()
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "fleetsim:", err)
	os.Exit(1)
}

// fleet is every simulated machine.
type fleet struct {
	dir   string
	log   *slog.Logger
	start time.Time

	mu       sync.Mutex
	machines []*machine
	caFiles  map[string]string // the tunnel CA's PEM → the file holding it

	// agentConns and webConns feed the one HTTP server each that serves
	// every machine's agent and web app (see serveWork).
	agentConns, webConns chan net.Conn
}

// MachineState is one machine in GET /state.
type MachineState struct {
	Name string `json:"name"`
	// Applied is the generation of the config its agent last applied.
	Applied int64 `json:"applied"`
	// Up says whether its client runs and is logged in to the tunnel
	// server (its control connection is up).
	Up bool `json:"up"`
	// Starts counts its client's starts (restarts after an exit or a
	// config whose common section changed included).
	Starts int64 `json:"starts"`
	// LastError is the last reason its client stopped or failed to log in.
	LastError string `json:"last_error,omitempty"`
}

// state serves GET /state: every machine, or the one ?name= names.
func (f *fleet) state(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	ms := append([]*machine(nil), f.machines...)
	f.mu.Unlock()
	name := r.URL.Query().Get("name")
	out := make([]MachineState, 0, len(ms))
	for _, m := range ms {
		if name == "" || m.name == name {
			out = append(out, m.state())
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}
