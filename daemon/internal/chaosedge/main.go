// Command chaosedge is the daemon as `tunnelsvc serve` runs it, its
// systemd replaced by a stand-in whose every job succeeds: the edges of
// the chaos figure (internal/bench), which runs where systemd is not the
// init system. Everything else is the real daemon, served by app.Serve;
// the tools it runs (caddy, frps) are the real ones found on PATH and in
// --bin-dir.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tunnelsvc/tunnelsvc/daemon/api"
	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:] // as `tunnelsvc serve` is called
	}
	cfg, err := config.Parse("chaosedge", args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosedge:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := app.Serve(ctx, cfg, app.NewLogger(cfg.LogLevel, os.Stderr), app.Deps{Units: &testutil.MemoryUnits{}}, api.ForDaemon); err != nil {
		fmt.Fprintln(os.Stderr, "chaosedge:", err)
		os.Exit(1)
	}
}
