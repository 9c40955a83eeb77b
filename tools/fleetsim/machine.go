package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fatedier/frp/client"
	"github.com/fatedier/frp/client/proxy"
	"github.com/fatedier/frp/pkg/config"
	"github.com/fatedier/frp/pkg/config/source"
	v1 "github.com/fatedier/frp/pkg/config/v1"
	"github.com/fatedier/frp/pkg/msg"
	"github.com/fatedier/frp/pkg/util/version"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
)

// RestartSec is how long a client that exited waits before it starts
// again (bootstrap.sh's unit: Restart=always, RestartSec=5).
const RestartSec = 5 * time.Second

// machine is one simulated machine.
type machine struct {
	f     *fleet
	name  string
	agent *agent.Server

	mu      sync.Mutex
	running *running // the client now running (nil between two starts)
	config  []byte   // the config installed
	// restart asks run to start the client again now (the agent's
	// restart).
	restart chan struct{}

	applied atomic.Int64
	starts  atomic.Int64
	lastErr atomic.Value // string
}

// running is one start of a machine's client.
type running struct {
	svc    *client.Service
	cancel context.CancelFunc
}

// add makes the machine of r, its client not started yet.
func (f *fleet) add(r Registration) (*machine, error) {
	m := &machine{f: f, name: r.Name, config: []byte(r.ClientConfig), restart: make(chan struct{}, 1)}
	m.agent = &agent.Server{Token: r.AgentToken, Unit: "revtunnel-client.service", Version: "fleetsim", Sys: system{m}, Log: f.log}
	if gen, ok := agent.Generation(m.config); ok {
		m.applied.Store(gen)
	}
	if _, _, _, err := f.parse(m.config); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.machines = append(f.machines, m)
	f.mu.Unlock()
	return m, nil
}

// run starts the machine's client and starts it again whenever it exits
// (after RestartSec) or is asked to restart, until ctx ends.
func (m *machine) run(ctx context.Context) {
	for ctx.Err() == nil {
		m.mu.Lock()
		conf := m.config
		m.mu.Unlock()
		err := m.once(ctx, conf)
		if ctx.Err() != nil {
			return
		}
		wait := time.Duration(0)
		if err != nil {
			m.lastErr.Store(err.Error())
			wait = RestartSec
		}
		select {
		case <-ctx.Done():
			return
		case <-m.restart:
		case <-time.After(wait):
		}
	}
}

// once runs the client with conf until it exits or is asked to restart.
func (m *machine) once(ctx context.Context, conf []byte) error {
	common, proxies, visitors, err := m.f.parse(conf)
	if err != nil {
		return err
	}
	cs := source.NewConfigSource()
	if err := cs.ReplaceAll(proxies, visitors); err != nil {
		return err
	}
	svc, err := client.NewService(client.ServiceOptions{
		Common:                 common,
		ConfigSourceAggregator: source.NewAggregator(cs),
		HandleWorkConnCb:       m.workConn,
	})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	m.mu.Lock()
	m.running = &running{svc: svc, cancel: cancel}
	m.mu.Unlock()
	m.starts.Add(1)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	select {
	case err = <-done:
	case <-m.restart:
		// Stopped, and started again at once by run.
		cancel()
		<-done
	}
	cancel()
	m.mu.Lock()
	m.running = nil
	m.mu.Unlock()
	return err
}

// up says whether the machine's client is logged in with its agent
// tunnel running.
func (m *machine) up() bool {
	m.mu.Lock()
	r := m.running
	m.mu.Unlock()
	if r == nil {
		return false
	}
	st, ok := r.svc.StatusExporter().GetProxyStatus("agent")
	return ok && st.Phase == proxy.ProxyPhaseRunning
}

func (m *machine) state() MachineState {
	e, _ := m.lastErr.Load().(string)
	return MachineState{Name: m.name, Applied: m.applied.Load(), Up: m.up(), Starts: m.starts.Load(), LastError: e}
}

// workConn serves a connection the tunnel server opened to one of the
// machine's services: the agent, the SSH server, a web app. It answers
// false: frp's own handling (a dial to the local service) does not go on.
func (m *machine) workConn(base *v1.ProxyBaseConfig, conn net.Conn, _ *msg.StartWorkConn) bool {
	switch {
	case base.Name == "agent":
		m.f.agentConns <- &machineConn{Conn: conn, m: m}
	case base.Name == "ssh":
		go func() {
			defer conn.Close()
			io.WriteString(conn, "SSH-2.0-fleetsim\r\n")
			io.Copy(io.Discard, conn)
		}()
	default:
		m.f.webConns <- &machineConn{Conn: conn, m: m}
	}
	return false
}

// machineConn is a work connection, with the machine it reached.
type machineConn struct {
	net.Conn
	m *machine
}

type ctxKey struct{}

// serveWork serves every machine's agent and web app: one HTTP server for
// each, fed the work connections (each knows its machine).
func (f *fleet) serveWork() {
	f.agentConns, f.webConns = make(chan net.Conn, 256), make(chan net.Conn, 256)
	ctx := func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, ctxKey{}, c.(*machineConn).m)
	}
	agents := &http.Server{ReadHeaderTimeout: 10 * time.Second, ConnContext: ctx,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Context().Value(ctxKey{}).(*machine).agent.ServeHTTP(w, r)
		})}
	web := &http.Server{ReadHeaderTimeout: 10 * time.Second, ConnContext: ctx,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s\n", r.Context().Value(ctxKey{}).(*machine).name)
		})}
	go agents.Serve(chanListener(f.agentConns))
	go web.Serve(chanListener(f.webConns))
}

// chanListener is a net.Listener whose connections come from a channel.
type chanListener chan net.Conn

func (l chanListener) Accept() (net.Conn, error) { return <-l, nil }
func (l chanListener) Close() error              { return nil }
func (l chanListener) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// parse reads a client config as frpc does (strict), with the two things
// a process of many clients must do otherwise: the tunnel CA (frpc reads
// it from the config file itself) comes from a file of the fleet's, and
// no client serves frpc's admin API (they would share its port).
func (f *fleet) parse(conf []byte) (*v1.ClientCommonConfig, []v1.ProxyConfigurer, []v1.VisitorConfigurer, error) {
	var all v1.ClientConfig
	if err := config.LoadConfigure(conf, &all, true, "toml"); err != nil {
		return nil, nil, nil, err
	}
	common := &all.ClientCommonConfig
	if err := common.Complete(); err != nil {
		return nil, nil, nil, err
	}
	if common.Transport.TLS.TrustedCaFile != "" {
		ca, err := f.caFile(conf)
		if err != nil {
			return nil, nil, nil, err
		}
		common.Transport.TLS.TrustedCaFile = ca
	}
	common.WebServer.Port = 0
	var proxies []v1.ProxyConfigurer
	for _, p := range all.Proxies {
		proxies = append(proxies, p.ProxyConfigurer)
	}
	var visitors []v1.VisitorConfigurer
	for _, v := range all.Visitors {
		visitors = append(visitors, v.VisitorConfigurer)
	}
	proxies, visitors = config.FilterClientConfigurers(common, proxies, visitors)
	return common, config.CompleteProxyConfigurers(proxies), config.CompleteVisitorConfigurers(visitors), nil
}

var caPEM = regexp.MustCompile(`(?s)-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----\n?`)

// caFile is a file holding the certificates conf names (one per CA).
func (f *fleet) caFile(conf []byte) (string, error) {
	pems := caPEM.FindAll(conf, -1)
	if len(pems) == 0 {
		return "", errors.New("the config names a CA file but carries no certificate")
	}
	pem := bytes.Join(pems, nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.caFiles == nil {
		f.caFiles = map[string]string{}
	}
	if p, ok := f.caFiles[string(pem)]; ok {
		return p, nil
	}
	sum := sha256.Sum256(pem)
	p := filepath.Join(f.dir, fmt.Sprintf("fleetsim-ca-%x.pem", sum[:6]))
	if err := os.WriteFile(p, pem, 0o600); err != nil {
		return "", err
	}
	f.caFiles[string(pem)] = p
	return p, nil
}

// system is what the agent does to a simulated machine.
type system struct{ m *machine }

func (s system) UnitState(context.Context) (map[string]string, error) {
	st := "inactive"
	s.m.mu.Lock()
	if s.m.running != nil {
		st = "active"
	}
	s.m.mu.Unlock()
	mono := time.Since(s.m.f.start).Microseconds()
	return map[string]string{"ActiveState": st, "SubState": "running", "ActiveEnterTimestampMonotonic": strconv.FormatInt(mono, 10)}, nil
}

func (s system) Restart(context.Context) error {
	select {
	case s.m.restart <- struct{}{}:
	default:
	}
	return nil
}

// ApplyConfig checks conf as frpc verify would, installs it, and reloads
// the running client as `frpc reload` does: its proxies and visitors in
// place, on the connection it has. A new common section (server, CA,
// credential) is taken at the client's next start, when the daemon asks
// the agent to restart it. (Restarting here, as this once did, made the
// daemon's own restart find no agent behind the tunnel: every machine's
// first delivery of a new server failed and was sent again after a
// backoff, about 3 deliveries a machine instead of 1.)
func (s system) ApplyConfig(_ context.Context, conf []byte) error {
	common, proxies, visitors, err := s.m.f.parse(conf)
	if err != nil {
		return &agent.ToolError{Op: "frpc verify", Output: err.Error(), Err: err}
	}
	m := s.m
	m.mu.Lock()
	m.config = append([]byte(nil), conf...)
	r := m.running
	m.mu.Unlock()
	if gen, ok := agent.Generation(conf); ok {
		defer m.applied.Store(gen)
	}
	if r == nil {
		return nil // taken at the next start
	}
	if err := r.svc.UpdateConfigSource(common, proxies, visitors); err != nil {
		return &agent.ToolError{Op: "frpc reload", Output: err.Error(), Err: err}
	}
	return nil
}

func (system) ClientVersion(context.Context) (string, error) { return version.Full(), nil }

func (s system) Monotonic() (time.Duration, error) { return time.Since(s.m.f.start), nil }

func (s system) Uninstall(context.Context) error { return errors.New("not on a simulated machine") }
