package localsetup

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
)

// TestVersionIsAskedOnceWhileTheFileIsTheSame: the status's caddy version
// runs `caddy version` once while caddy is the same file, again after an
// upgrade replaced it, and every time while caddy is missing (so
// installing it shows at once).
func TestVersionIsAskedOnceWhileTheFileIsTheSame(t *testing.T) {
	bin := t.TempDir()
	calls := filepath.Join(bin, "calls")
	caddy := filepath.Join(bin, "caddy")
	write := func(version string) {
		t.Helper()
		if err := os.WriteFile(caddy, []byte("#!/bin/sh\necho \"caddy $*\" >>"+calls+"\necho '"+version+" h1:abc='\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin) // the script needs only sh and its builtins
	s := &Service{Run: cmdrun.Exec{}}
	ctx := context.Background()
	ask := func(want, wantCalls string) {
		t.Helper()
		_ = os.Remove(calls)
		got := s.version(ctx, "caddy", "version")
		ran, _ := os.ReadFile(calls)
		if got != want || strings.TrimSpace(string(ran)) != wantCalls {
			t.Fatalf("version %q, ran %q; want %q, %q", got, ran, want, wantCalls)
		}
	}
	ask("", "") // missing
	write("v2.6.2")
	ask("v2.6.2", "caddy version")
	ask("v2.6.2", "")
	write("v2.7.6")
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(caddy, later, later); err != nil {
		t.Fatal(err)
	}
	ask("v2.7.6", "caddy version")
	ask("v2.7.6", "")
	if err := os.Remove(caddy); err != nil {
		t.Fatal(err)
	}
	ask("", "")
}
