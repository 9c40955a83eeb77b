// Command tunnel-agent is the machine agent (see package agent).
//
//	tunnel-agent [serve]      serve on 127.0.0.1:$TUNNEL_AGENT_PORT
//	tunnel-agent apply-config read a client config on stdin, check it against the allow-list
//	                          (agent.CheckClientConfig), verify, install, reload (root)
//	tunnel-agent apply-clients
//	                          read a client set (JSON: the home edge's config and each other
//	                          edge's) on stdin, install each as apply-config does, start the
//	                          clients of new edges, remove those of edges that left (root)
//	tunnel-agent apply-update read a header line and a machine bundle on stdin, check it, save
//	                          the installed bundle, arm the rollback timer, install, restart (root)
//	tunnel-agent confirm-update
//	                          the update is seen to work: stop the rollback timer (root)
//	tunnel-agent version
//
// Settings come from the environment (the unit loads /etc/tunnel-agent/config.env):
// TUNNEL_AGENT_TOKEN, TUNNEL_AGENT_PORT, TUNNEL_AGENT_UNIT (revtunnel-client.service),
// TUNNEL_AGENT_FRPC (/usr/local/bin/revtunnel-client),
// TUNNEL_AGENT_CLIENT_CONFIG (/etc/revtunnel/client.toml).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
)

var version = "dev"

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	cmd := "serve"
	if len(os.Args) > 1 {
		cmd = os.Args[1]
	}
	var err error
	switch cmd {
	case "serve":
		err = serve()
	case "apply-config":
		err = applyConfig()
	case "apply-clients":
		err = applyClients()
	case "apply-update":
		err = applyUpdate()
	case "confirm-update":
		err = confirmUpdate()
	case "version", "--version", "-v":
		fmt.Println("tunnel-agent", version)
	default:
		fmt.Fprintf(os.Stderr, "usage: tunnel-agent [serve|apply-config|apply-clients|apply-update|confirm-update|version]\n")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tunnel-agent:", err)
		if errors.Is(err, agent.ErrRefused) {
			os.Exit(agent.ExitRefused)
		}
		os.Exit(1)
	}
}

func frpc() string { return env("TUNNEL_AGENT_FRPC", "/usr/local/bin/revtunnel-client") }

func applyConfig() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("apply-config must run as root (the agent calls it through sudo)")
	}
	data, err := io.ReadAll(io.LimitReader(os.Stdin, agent.MaxConfigBytes+1))
	if err != nil {
		return err
	}
	if len(data) > agent.MaxConfigBytes {
		return fmt.Errorf("%w: config larger than %d bytes", agent.ErrRefused, agent.MaxConfigBytes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return agent.Applier{FRPC: frpc(), Path: env("TUNNEL_AGENT_CLIENT_CONFIG", "/etc/revtunnel/client.toml")}.Apply(ctx, data)
}

func applyClients() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("apply-clients must run as root (the agent calls it through sudo)")
	}
	data, err := io.ReadAll(io.LimitReader(os.Stdin, agent.MaxConfigBytes+1))
	if err != nil {
		return err
	}
	if len(data) > agent.MaxConfigBytes {
		return fmt.Errorf("%w: client set larger than %d bytes", agent.ErrRefused, agent.MaxConfigBytes)
	}
	set, err := agent.ParseClientSet(data)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := filepath.Dir(env("TUNNEL_AGENT_CLIENT_CONFIG", "/etc/revtunnel/client.toml"))
	return agent.ClientsApplier{FRPC: frpc(), Dir: dir}.Apply(ctx, set)
}

func applyUpdate() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("apply-update must run as root (the agent calls it through sudo)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), agent.ApplyTimeout)
	defer cancel()
	return (&agent.Updater{Version: version}).Apply(ctx, os.Stdin)
}

func confirmUpdate() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("confirm-update must run as root (the agent calls it through sudo)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return (&agent.Updater{Version: version}).Confirm(ctx)
}

func serve() error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	token := os.Getenv("TUNNEL_AGENT_TOKEN")
	if token == "" {
		return fmt.Errorf("TUNNEL_AGENT_TOKEN is not set (see /etc/tunnel-agent/config.env)")
	}
	port, err := strconv.Atoi(os.Getenv("TUNNEL_AGENT_PORT"))
	if err != nil || port < 1 || port > 65535 {
		return fmt.Errorf("TUNNEL_AGENT_PORT=%q is not a port", os.Getenv("TUNNEL_AGENT_PORT"))
	}
	unit := env("TUNNEL_AGENT_UNIT", "revtunnel-client.service")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	sudo := "sudo"
	if os.Geteuid() == 0 {
		sudo = ""
	}
	srv := &agent.Server{
		Token: token, Unit: unit, Version: version, Log: log,
		Sys: agent.Commands{Unit: unit, FRPC: frpc(), Self: self,
			UninstallScript: env("TUNNEL_AGENT_UNINSTALL", "/usr/local/bin/tunnel-uninstall"), Sudo: sudo},
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}()
	log.Info("tunnel-agent listening", "addr", ln.Addr().String(), "unit", unit, "version", version)
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
