package app

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// A daemon started on a full data disk cannot open its database; it says
// why in words, beside SQLite's.
func TestStartOnAFullDataDisk(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir, cfg.SystemRoot = testutil.Tmpfs(t, "8m"), t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := Services(context.Background(), &cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	a.Store.Close()
	testutil.FillDisk(t, cfg.DataDir)
	_, err = Services(context.Background(), &cfg, log)
	if err == nil || !strings.Contains(err.Error(), "open store in "+cfg.DataDir+": the data disk is full: free space on it, then start again: ") {
		t.Fatalf("start on a full disk: %v", err)
	}
	t.Log(err)
}
