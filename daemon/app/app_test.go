package app

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
)

// testApp is the daemon's services on the default configuration, with a
// data directory and a system root of the test's own, and binDir (frps's
// directory, or "" when the test starts no engine) as the binaries'.
func testApp(t *testing.T, binDir string, deps ...Deps) *App {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir, cfg.SystemRoot = t.TempDir(), t.TempDir()
	if binDir != "" {
		cfg.BinDir = binDir
	}
	var d Deps
	if len(deps) > 0 {
		d = deps[0]
	}
	// The daemon as Serve builds it, nothing started.
	a, err := New(context.Background(), &cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// bootstrapNAS registers the machine "nas" the way bootstrap.sh does.
func bootstrapNAS(t *testing.T, a *App) machines.Registration {
	t.Helper()
	ctx := context.Background()
	tok, err := a.Machines.CreateToken(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := a.Machines.Bootstrap(ctx, machines.BootstrapRequest{Token: tok.Token, Name: "nas", Username: "pi", FallbackHost: "vps.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}
