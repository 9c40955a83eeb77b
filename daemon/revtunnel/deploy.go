package revtunnel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/atomicfile"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
)

// ServerConfigPath is where the server config is deployed (under --system-root).
const ServerConfigPath = "/etc/revtunnel/server.toml"

// ServerUnit is the systemd unit that runs frps.
const ServerUnit = "revtunnel-server.service"

// UnitRestarter restarts an allow-listed systemd unit. The unit layer
// provides it; nil means there is no systemd to talk to.
type UnitRestarter interface {
	Restart(ctx context.Context, name string) error
}

// verifyTimeout bounds one `frps verify` / `frpc verify` run.
const verifyTimeout = 20 * time.Second

// Verify runs `<bin> verify -c <file>` with the config in a temporary file
// and returns the tool's own words when it refuses the config.
func Verify(ctx context.Context, bin, config string) error {
	dir, err := os.MkdirTemp("", "revtunnel-verify-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return err
	}
	return VerifyFile(ctx, bin, path)
}

// VerifyFile runs `<bin> verify -c path`. Its error carries the tool's
// message line only (cmdrun.Message).
func VerifyFile(ctx context.Context, bin, path string) error {
	ctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "verify", "-c", path).CombinedOutput()
	if err != nil {
		tool := filepath.Base(bin)
		return &ToolError{Tool: tool, Output: cmdrun.Message(tool, cmdrun.Result{Stdout: string(out), Err: err}, path)}
	}
	return nil
}

// ToolError is a refusal by frps or frpc, in its own words.
type ToolError struct {
	Tool, Output string
}

func (e *ToolError) Error() string { return e.Tool + " verify: " + e.Output }

// Deployer renders, checks, writes and applies the server config.
type Deployer struct {
	// Path is the deployed file (ServerConfigPath under the system root).
	Path string
	// FRPS is the frps binary used for `frps verify`.
	FRPS string
	// Units restarts revtunnel-server; nil skips the restart and says so.
	Units UnitRestarter
	// Params returns the current settings.
	Params func(ctx context.Context) (frpconf.ServerParams, error)
}

// Render returns the config as it would be deployed now, with the custom
// block left empty (the diagnostic view, spec §4.4).
func (d *Deployer) Render(ctx context.Context) (string, error) {
	p, err := d.Params(ctx)
	if err != nil {
		return "", err
	}
	return frpconf.ServerConfig(p, "")
}

// Reconcile renders the config keeping the deployed file's custom block,
// checks it with `frps verify`, writes it atomically and restarts
// revtunnel-server, each step only when the content changed. A refused
// config leaves the deployed file as it was.
func (d *Deployer) Reconcile(ctx context.Context) (string, error) {
	p, err := d.Params(ctx)
	if err != nil {
		return "", err
	}
	old, err := os.ReadFile(d.Path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", d.Path, err)
	}
	custom, ok := frpconf.CustomBlock(string(old))
	if len(old) > 0 && !ok {
		// Not a file we wrote (or its markers were removed): keep a copy
		// rather than silently dropping what the operator had there.
		if err := os.WriteFile(d.Path+".bak", old, 0o600); err != nil {
			return "", fmt.Errorf("back up %s: %w", d.Path, err)
		}
	}
	next, err := frpconf.ServerConfig(p, custom)
	if err != nil {
		return "", err
	}
	if bytes.Equal(old, []byte(next)) {
		return "revtunnel-server configuration unchanged", nil
	}
	if err := Verify(ctx, d.FRPS, next); err != nil {
		return "", err
	}
	if err := atomicfile.Write(d.Path, []byte(next), 0o640); err != nil {
		return "", err
	}
	if d.Units == nil {
		return "revtunnel-server configuration written; no unit manager, so revtunnel-server was not restarted", nil
	}
	if err := d.Units.Restart(ctx, ServerUnit); err != nil {
		return "", fmt.Errorf("configuration written, but restarting %s failed: %w", ServerUnit, err)
	}
	return "revtunnel-server configuration written and revtunnel-server restarted", nil
}
