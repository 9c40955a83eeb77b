package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
)

const machinesUsage = "usage: tunnelsvc machines outdated [--json] [--data-dir DIR]"

// machinesCmd runs `tunnelsvc machines <sub>`.
func machinesCmd(args []string, out io.Writer) error {
	if len(args) == 0 || args[0] != "outdated" {
		return errors.New(machinesUsage)
	}
	return machinesOutdated(args[1:], out)
}

// machinesOutdated lists the machines whose agent cannot take a fleet
// update, each with the one line that re-runs its join (keeping its id,
// name, ports and tunnels). It opens the database directly, so it works
// while the daemon runs.
func machinesOutdated(args []string, out io.Writer) error {
	cfg := config.Default()
	fset := flag.NewFlagSet("machines outdated", flag.ContinueOnError)
	nets := config.Register(fset, &cfg)
	asJSON := fset.Bool("json", false, "print JSON: a list of {id, name, status, reason, command, rejoin_command, ssh_command}")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return fmt.Errorf("machines outdated: unexpected argument %q", fset.Arg(0))
	}
	if err := cfg.Finish(*nets); err != nil {
		return err
	}
	if _, err := os.Stat(cfg.DataDir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no data directory at %s (pass --data-dir)", cfg.DataDir)
	}
	ctx := context.Background()
	a, err := app.Services(ctx, &cfg, app.NewLogger("error", io.Discard))
	if err != nil {
		return err
	}
	defer a.Store.Close()
	ms, err := a.OutdatedMachines(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(ms)
	}
	if len(ms) == 0 {
		fmt.Fprintln(out, "no machine needs a rejoin: every agent this server has reached takes fleet updates")
		return nil
	}
	fmt.Fprintf(out, "%d machine(s) run an agent from before fleet updates. Run the line under each\n", len(ms))
	fmt.Fprintln(out, "(it re-runs the join and keeps the machine's id, name, ports and tunnels):")
	for _, m := range ms {
		fmt.Fprintf(out, "\n%s (id %d, %s)\n  %s\n", m.Name, m.ID, m.Status, m.Command)
	}
	fmt.Fprintf(out, "\nOn a machine itself, the line is:\n  %s\n", ms[0].RejoinCommand)
	return nil
}
