// Command tunnelsvc is the control-plane daemon and its admin commands.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/tunnelsvc/tunnelsvc/daemon/api"
	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/units/sdbus"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage: tunnelsvc <command> [flags]

commands:
  serve            run the daemon (socket-activated under systemd, else --listen)
  version          print the version
  setup-code       print the one-time code a remote first setup needs
  reset-password   set a new operator password, end every session, revoke every API token
  disable-2fa      turn two-factor authentication off (lost authenticator)
  machines outdated  list machines whose agent predates fleet updates, with the line to run on each
  export           print the cluster's tunnels, domain and webhook as a site file (docs/automation.md)
  apply -f FILE    make the cluster match a site file, all or none (--dry-run, --prune)
  edge join        join this VPS to a cluster as one more edge (docs/edges.md)
  db copy          copy every row to another, empty database (SQLite <-> PostgreSQL); stop the daemon first
  config-reference print every serve flag and variable (docs/configuration.md)
  help             this text

Run 'tunnelsvc <command> -h' for the flags of a command.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "serve":
		err = serve(args)
	case "version", "--version", "-v":
		fmt.Println("tunnelsvc", version)
	case "setup-code":
		err = setupCode(args, os.Stdout)
	case "reset-password":
		err = resetPassword(args, os.Stdin, os.Stdout)
	case "disable-2fa":
		err = disable2FA(args, os.Stdout)
	case "machines":
		err = machinesCmd(args, os.Stdout)
	case "db":
		err = dbCmd(args, os.Stdout)
	case "edge":
		err = edgeCmd(args, os.Stdout)
	case "export":
		err = exportCmd(args, os.Stdout)
	case "apply":
		err = applyCmd(args, os.Stdout)
	case "config-reference":
		err = config.WriteReference(os.Stdout)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "tunnelsvc: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tunnelsvc:", err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	cfg, err := config.Parse("serve", args)
	if err != nil {
		return err
	}
	log := app.NewLogger(cfg.LogLevel, os.Stderr)
	// The database URL only ever redacted: it may hold a password.
	db := app.DatabaseStatus(cfg)
	log.Info("starting", "version", version, "data_dir", cfg.DataDir, "system_root", cfg.SystemRoot,
		"database", db.Engine, "database_url", db.URL)
	setMemoryLimit(log)
	cfg.Version = version
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// systemd's units, over D-Bus (their every operation says so when
	// systemd is not the init system).
	unitMgr := sdbus.New(sdbus.Options{Log: log})
	defer unitMgr.Close()
	if !sdbus.Booted() {
		log.Info("systemd is not the init system: unit control is unavailable")
	}
	return app.Serve(ctx, cfg, log, app.Deps{Units: unitMgr, Serving: func(*app.App) { releaseStartupPages() }}, api.ForDaemon)
}

// defaultMemoryLimit is the Go heap's soft limit unless GOMEMLIMIT says
// otherwise. Each argon2id run allocates 64 MiB that is garbage a moment
// later; without a limit the collector lets the heap grow to twice what is
// live, and a login flood would hold hundreds of MiB for nothing.
const defaultMemoryLimit = 192 << 20

func setMemoryLimit(log *slog.Logger) {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		return
	}
	debug.SetMemoryLimit(defaultMemoryLimit)
	log.Debug("heap soft limit set", "bytes", defaultMemoryLimit)
}
