package revtunnel_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// frps and frpc are the pinned binaries in the repository's bin/.
var frps, frpc string

// TestMain finds bin/frps and bin/frpc, building them with `make frp` when
// they are missing (about a minute cold on 2 cores).
func TestMain(m *testing.M) {
	flag.Parse()
	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	frps, frpc = filepath.Join(root, "bin", "frps"), filepath.Join(root, "bin", "frpc")
	if !exists(frps) || !exists(frpc) {
		fmt.Fprintln(os.Stderr, "revtunnel tests: bin/frps or bin/frpc missing; running `make frp`")
		cmd := exec.Command("make", "-C", root, "frp")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "revtunnel tests need frps and frpc: `make frp` failed: %v\n", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

func exists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if exists(filepath.Join(dir, "go.mod")) && exists(filepath.Join(dir, "tools", "frp", "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("revtunnel tests: no repository root (go.mod beside tools/frp) above the test directory")
		}
		dir = parent
	}
}
