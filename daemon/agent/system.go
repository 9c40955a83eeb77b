package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Commands is the production System: systemctl, sudo and frpc.
type Commands struct {
	Unit string
	// FRPC is the tunnel client binary.
	FRPC string
	// Self is this agent's binary (for `sudo -n Self apply-config`).
	Self string
	// Uninstall is the uninstall script.
	UninstallScript string
	// Sudo is "sudo" when the agent runs unprivileged (the default), ""
	// when it runs as root.
	Sudo string
}

func run(ctx context.Context, stdin []byte, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c Commands) priv(ctx context.Context, stdin []byte, args ...string) (string, error) {
	if c.Sudo != "" {
		args = append([]string{c.Sudo, "-n"}, args...)
	}
	return run(ctx, stdin, args[0], args[1:]...)
}

func (c Commands) UnitState(ctx context.Context) (map[string]string, error) {
	out, err := run(ctx, nil, "systemctl", "show", "-p", "ActiveState,SubState,ActiveEnterTimestampMonotonic", c.Unit)
	if err != nil {
		return nil, &ToolError{Op: "systemctl show", Output: out, Err: err}
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		m[k] = v
	}
	return m, nil
}

func (c Commands) Restart(ctx context.Context) error {
	if out, err := c.priv(ctx, nil, "systemctl", "restart", c.Unit); err != nil {
		return &ToolError{Op: "systemctl restart " + c.Unit, Output: out, Err: err}
	}
	return nil
}

func (c Commands) ApplyConfig(ctx context.Context, config []byte) error {
	out, err := c.priv(ctx, config, c.Self, "apply-config")
	if err != nil {
		var ee *exec.ExitError
		if asExit(err, &ee) && ee.ExitCode() == ExitRefused {
			return fmt.Errorf("%w: %s", ErrRefused, strings.TrimSpace(out))
		}
		return &ToolError{Op: "apply-config", Output: out, Err: err}
	}
	return nil
}

func asExit(err error, target **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*target = e
	}
	return ok
}

func (c Commands) ClientVersion(ctx context.Context) (string, error) {
	out, err := run(ctx, nil, c.FRPC, "-v")
	if err != nil {
		return "", &ToolError{Op: c.FRPC + " -v", Output: out, Err: err}
	}
	return strings.TrimSpace(out), nil
}

func (c Commands) Monotonic() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}

func (c Commands) Uninstall(ctx context.Context) error {
	if out, err := c.priv(ctx, nil, c.UninstallScript, "--detach"); err != nil {
		return &ToolError{Op: "tunnel-uninstall --detach", Output: out, Err: err}
	}
	return nil
}

// ExitRefused is apply-config's exit status when frpc refused the config.
const ExitRefused = 3

// Applier installs a client config: `frpc verify` on a temporary file beside
// the target, then an atomic rename, then `frpc reload`. A refused config or
// a failed reload leaves the previous file in place.
type Applier struct {
	FRPC string
	Path string
	// Reload reloads the running client (default: frpc reload -c Path).
	Reload func(ctx context.Context) (string, error)
}

// Apply does it; a refusal wraps ErrRefused with frpc's own words.
func (a Applier) Apply(ctx context.Context, config []byte) error {
	dir := filepath.Dir(a.Path)
	tmp, err := os.CreateTemp(dir, ".client-*.toml")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(config); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if out, err := run(ctx, nil, a.FRPC, "verify", "-c", tmp.Name()); err != nil {
		return fmt.Errorf("%w: frpc verify: %s", ErrRefused, strings.TrimSpace(strings.ReplaceAll(out, tmp.Name(), "the new config")))
	}
	old, oldErr := os.ReadFile(a.Path)
	if err := os.Rename(tmp.Name(), a.Path); err != nil {
		return err
	}
	reload := a.Reload
	if reload == nil {
		reload = func(ctx context.Context) (string, error) { return run(ctx, nil, a.FRPC, "reload", "-c", a.Path) }
	}
	if out, err := reload(ctx); err != nil {
		if oldErr == nil {
			if werr := writeAtomic(a.Path, old); werr != nil {
				return fmt.Errorf("frpc reload: %s (%v); restoring the previous config also failed: %v", strings.TrimSpace(out), err, werr)
			}
		}
		return &ToolError{Op: "frpc reload (the previous config is back in place)", Output: out, Err: err}
	}
	return nil
}

func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".client-*.toml")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	tmp.Chmod(0o600)
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
