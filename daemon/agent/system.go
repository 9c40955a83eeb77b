package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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

var _ Updates = Commands{}

func (c Commands) ApplyUpdate(ctx context.Context, stdin io.Reader) error {
	args := []string{c.Self, "apply-update"}
	if c.Sudo != "" {
		args = append([]string{c.Sudo, "-n"}, args...)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if err != nil {
		return &ToolError{Op: "apply-update", Output: helperWords(string(out)), Err: err}
	}
	return nil
}

func (c Commands) ConfirmUpdate(ctx context.Context) error {
	if out, err := c.priv(ctx, nil, c.Self, "confirm-update"); err != nil {
		return &ToolError{Op: "confirm-update", Output: helperWords(out), Err: err}
	}
	return nil
}

// helperWords is what the root helper said, without the "tunnel-agent: "
// its main puts before an error.
func helperWords(out string) string {
	return strings.TrimPrefix(strings.TrimSpace(out), "tunnel-agent: ")
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
	return c.apply(ctx, "apply-config", config)
}

// apply runs root's helper `Self op` with stdin; its ExitRefused is a
// refusal (ErrRefused, in the helper's words).
func (c Commands) apply(ctx context.Context, op string, stdin []byte) error {
	out, err := c.priv(ctx, stdin, c.Self, op)
	if err != nil {
		var ee *exec.ExitError
		if asExit(err, &ee) && ee.ExitCode() == ExitRefused {
			return fmt.Errorf("%w: %s", ErrRefused, strings.TrimSpace(out))
		}
		return &ToolError{Op: op, Output: out, Err: err}
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

// Applier installs a client config: the allow-list (CheckClientConfig),
// `frpc verify` on a temporary file beside the target, then an atomic rename,
// then `frpc reload`. A refused config or a failed reload leaves the previous
// file in place. The new file keeps the owner, group and mode of the one it
// replaces (root:revtunnel 0640 as bootstrap.sh installs it, so that frpc,
// which runs as revtunnel, can read it and only root can write it); 0600
// when there is none.
type Applier struct {
	FRPC string
	Path string
	// Like (may be empty) is a file whose owner and mode a new Path takes
	// (an edge's client config takes client.toml's).
	Like string
	// Reload reloads the running client (default: frpc reload -c Path).
	Reload func(ctx context.Context) (string, error)
}

// Apply does it; a refusal wraps ErrRefused with the reason, in frpc's own
// words when frpc refused.
func (a Applier) Apply(ctx context.Context, config []byte) error {
	if err := CheckClientConfig(config, filepath.Dir(a.Path)); err != nil {
		return err
	}
	old, oldErr := os.ReadFile(a.Path)
	like, statErr := os.Stat(a.Path)
	if statErr != nil && a.Like != "" {
		like, statErr = os.Stat(a.Like)
	}
	if statErr != nil {
		like = nil
	}
	tmp, err := writeTemp(a.Path, config, like)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if out, err := run(ctx, nil, a.FRPC, "verify", "-c", tmp); err != nil {
		return fmt.Errorf("%w: frpc verify: %s", ErrRefused, strings.TrimSpace(strings.ReplaceAll(out, tmp, "the new config")))
	}
	if err := os.Rename(tmp, a.Path); err != nil {
		return err
	}
	reload := a.Reload
	if reload == nil {
		reload = func(ctx context.Context) (string, error) { return run(ctx, nil, a.FRPC, "reload", "-c", a.Path) }
	}
	if out, err := reload(ctx); err != nil {
		if oldErr == nil {
			if werr := writeAtomic(a.Path, old, like); werr != nil {
				return fmt.Errorf("frpc reload: %s (%v); restoring the previous config also failed: %v", strings.TrimSpace(out), err, werr)
			}
		}
		return &ToolError{Op: "frpc reload (the previous config is back in place)", Output: out, Err: err}
	}
	return nil
}

// writeTemp writes data to a new temporary file beside path, with the owner,
// group and mode of like (0600 and the caller's own when like is nil), and
// returns its name.
func writeTemp(path string, data []byte, like os.FileInfo) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), ".client-*.toml")
	if err != nil {
		return "", err
	}
	name := f.Name()
	err = func() error {
		mode := os.FileMode(0o600)
		if like != nil {
			mode = like.Mode().Perm()
			if st, ok := like.Sys().(*syscall.Stat_t); ok {
				if err := f.Chown(int(st.Uid), int(st.Gid)); err != nil {
					return err
				}
			}
		}
		if err := f.Chmod(mode); err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			return err
		}
		return f.Sync()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}

func writeAtomic(path string, data []byte, like os.FileInfo) error {
	tmp, err := writeTemp(path, data, like)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	return os.Rename(tmp, path)
}
