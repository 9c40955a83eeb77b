package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
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

// TestCloseWaitsForTheRunningOperation: an operation still running when
// the daemon stops (an install, a firewall takeover) sees the daemon's
// life end, and Close waits for it to finish before the store closes.
func TestCloseWaitsForTheRunningOperation(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir, cfg.SystemRoot = t.TempDir(), t.TempDir()
	a, err := New(context.Background(), &cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	op, err := a.Hub.Begin("install")
	if err != nil {
		t.Fatal(err)
	}
	var finished atomic.Bool
	go func() {
		<-a.Life().Done()
		// Winding down takes a moment, and writes its outcome.
		time.Sleep(100 * time.Millisecond)
		_, werr := a.Store.GetSetting(context.Background(), "domain")
		finished.Store(werr == nil || errors.Is(werr, store.ErrNotFound))
		op.Done(false)
	}()
	a.Close()
	if !finished.Load() {
		t.Fatal("Close returned before the running operation had finished with the store open")
	}
}
