// Command chaosedge is the daemon as `tunnelsvc serve` runs it, its
// systemd replaced by a stand-in whose every job succeeds: the edges of
// the chaos figure (internal/bench), which runs where systemd is not the
// init system. Everything else is the real daemon, served by app.Serve;
// the tools it runs (caddy, frps) are the real ones found on PATH and in
// --bin-dir.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/tunnelsvc/tunnelsvc/daemon/api"
	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

func main() {
	cfg := config.Default()
	fs := flag.NewFlagSet("chaosedge", flag.ExitOnError)
	nets := config.Register(fs, &cfg)
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:] // as `tunnelsvc serve` is called
	}
	fs.Parse(args)
	if err := cfg.Finish(*nets); err != nil {
		fmt.Fprintln(os.Stderr, "chaosedge:", err)
		os.Exit(2)
	}
	var level slog.Level
	level.UnmarshalText([]byte(cfg.LogLevel))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := app.Serve(ctx, &cfg, log, &testutil.MemoryUnits{}, api.ForDaemon); err != nil {
		fmt.Fprintln(os.Stderr, "chaosedge:", err)
		os.Exit(1)
	}
}
