package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Updater is the root side of an update: `tunnel-agent apply-update` and
// `tunnel-agent confirm-update`, which the agent runs through sudo.
type Updater struct {
	// Root prefixes every path on the machine ("" in production; a
	// temporary directory in tests).
	Root string
	// Version is this binary's version: the bundle version of a machine
	// bootstrapped before bundles, which has no LIB/bundle-version.
	Version string
	// Run runs a command and returns its combined output (default: exec).
	Run func(ctx context.Context, name string, args ...string) (string, error)
	// LookPath finds a command on PATH (default exec.LookPath).
	LookPath func(name string) (string, error)
	// Now is the clock update-state is stamped with (default time.Now).
	Now func() time.Time
}

func (u *Updater) path(p string) string { return filepath.Join(u.Root, p) }
func (u *Updater) lib(name string) string {
	return filepath.Join(u.Root, LibDir, name)
}

func (u *Updater) run(ctx context.Context, name string, args ...string) error {
	r := u.Run
	if r == nil {
		r = func(ctx context.Context, name string, args ...string) (string, error) {
			return run(ctx, nil, name, args...)
		}
	}
	if out, err := r(ctx, name, args...); err != nil {
		return &ToolError{Op: name + " " + strings.Join(args, " "), Output: out, Err: err}
	}
	return nil
}

func (u *Updater) lookPath(name string) (string, error) {
	if u.LookPath != nil {
		return u.LookPath(name)
	}
	return exec.LookPath(name)
}

func (u *Updater) now() time.Time {
	if u.Now != nil {
		return u.Now()
	}
	return time.Now()
}

func (u *Updater) writeState(st UpdateState) error {
	st.At = u.now().UTC().Format(time.RFC3339)
	return installFile(u.lib("update-state"), st.file(), 0o644)
}

// ReadUpdateHeader reads apply-update's first line.
func ReadUpdateHeader(r *bufio.Reader) (UpdateHeader, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return UpdateHeader{}, fmt.Errorf("no header line on stdin (want {\"version\",\"sha256\",\"size\"}): %v", err)
	}
	var h UpdateHeader
	if err := json.Unmarshal(line, &h); err != nil {
		return UpdateHeader{}, fmt.Errorf("header line: %v", err)
	}
	return h, h.check()
}

// Apply is apply-update: stdin is the header line, then the bundle. It
// checks everything before it changes anything; then it saves the installed
// bundle to LIB/previous, arms the rollback timer, installs the new files
// and restarts the agent last (that restart ends the caller, whose cgroup
// this runs in).
func (u *Updater) Apply(ctx context.Context, stdin io.Reader) error {
	br := bufio.NewReaderSize(stdin, 4096)
	h, err := ReadUpdateHeader(br)
	if err != nil {
		return err
	}
	data, err := readChecked(br, h)
	if err != nil {
		return err
	}
	files, err := readBundle(data, h.Version)
	if err != nil {
		return fmt.Errorf("%v; nothing was changed", err)
	}
	sudoersDir := u.path("/etc/sudoers.d")
	_, noSudo := os.Stat(sudoersDir)
	if noSudo == nil {
		systemctl, err := u.lookPath("systemctl")
		if err != nil {
			return fmt.Errorf("bundle refused: systemctl is not on PATH, so the sudo rules cannot name it: %v", err)
		}
		rules := bytes.ReplaceAll(files["sudoers-tunnel-agent"], []byte(systemctlMark), []byte(systemctl))
		if err := u.visudo(ctx, rules); err != nil {
			return err
		}
		files["sudoers-tunnel-agent"] = rules
	}

	// The installed bundle, as it will be put back.
	prev := map[string][]byte{"VERSION": []byte(readBundleVersion(u.lib(""), u.Version) + "\n")}
	for _, f := range bundleFiles {
		if f.Target == "" {
			continue
		}
		b, err := os.ReadFile(u.path(f.Target))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("could not save the installed bundle: %v; nothing was changed", err)
		}
		prev[f.Name] = b
	}
	if err := u.savePrevious(prev); err != nil {
		return fmt.Errorf("could not save the installed bundle to %s: %v; nothing was changed", u.lib("previous"), err)
	}
	if err := u.arm(ctx, h.Version); err != nil {
		u.disarm(context.WithoutCancel(ctx))
		return fmt.Errorf("could not arm the rollback timer: %v; nothing was changed", err)
	}
	if err := u.writeState(UpdateState{State: UpdateApplying, Version: h.Version}); err != nil {
		u.disarm(context.WithoutCancel(ctx))
		return fmt.Errorf("could not write %s: %v; nothing was changed", u.lib("update-state"), err)
	}

	clientChanged := false
	for _, f := range bundleFiles {
		if f.Target == "" || f.Name == "sudoers-tunnel-agent" && noSudo != nil {
			continue
		}
		if !bytes.Equal(prev[f.Name], files[f.Name]) && strings.HasPrefix(f.Name, "revtunnel-client") {
			clientChanged = true
		}
		if err := installFile(u.path(f.Target), files[f.Name], os.FileMode(f.Mode)); err != nil {
			return u.undo(ctx, h.Version, prev, fmt.Errorf("could not install %s: %v", u.path(f.Target), err))
		}
	}
	if err := installFile(u.lib("bundle-version"), []byte(h.Version+"\n"), 0o644); err != nil {
		return u.undo(ctx, h.Version, prev, err)
	}
	if err := u.run(ctx, "systemctl", "daemon-reload"); err != nil {
		return u.undo(ctx, h.Version, prev, err)
	}
	if clientChanged {
		// Armed already: should the new client not come up, the rollback
		// timer puts the old one back along with the old agent.
		if err := u.run(ctx, "systemctl", "restart", "revtunnel-client.service"); err != nil {
			return u.pending(h.Version, prev, err)
		}
		// The clients of the cluster's other edges run the same binary.
		for _, edge := range installedEdges(u.path("/etc/revtunnel")) {
			if err := u.run(ctx, "systemctl", "restart", EdgeUnit(edge)); err != nil {
				return u.pending(h.Version, prev, err)
			}
		}
	}
	if err := u.run(ctx, "systemctl", "--no-block", "restart", "tunnel-agent.service"); err != nil {
		return u.pending(h.Version, prev, err)
	}
	return nil
}

// visudo checks the rules with visudo, when there is one, on a temporary
// file beside the target (its name has a dot, which sudo's includedir skips).
func (u *Updater) visudo(ctx context.Context, rules []byte) error {
	visudo, err := u.lookPath("visudo")
	if err != nil {
		return nil
	}
	f, err := os.CreateTemp(u.path("/etc/sudoers.d"), ".tunnel-agent.check-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(rules)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := u.run(ctx, visudo, "-cf", f.Name()); err != nil {
		return fmt.Errorf("bundle refused: visudo refused its sudo rules: %v; nothing was changed", err)
	}
	return nil
}

// savePrevious replaces LIB/previous with prev as a whole: a rollback finds
// either the old set or the new one.
func (u *Updater) savePrevious(prev map[string][]byte) error {
	dir, tmp, old := u.lib("previous"), u.lib("previous.new"), u.lib("previous.old")
	for _, d := range []string{tmp, old} {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	for _, f := range bundleFiles {
		if b, ok := prev[f.Name]; ok {
			if err := installFile(filepath.Join(tmp, f.Name), b, os.FileMode(f.Mode)); err != nil {
				return err
			}
		}
	}
	if err := os.Rename(dir, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	return os.RemoveAll(old)
}

// arm writes rollback.sh and its units and starts the timer.
func (u *Updater) arm(ctx context.Context, version string) error {
	units := u.path("/etc/systemd/system")
	for _, w := range []struct {
		path string
		text string
		mode os.FileMode
	}{
		{u.lib("rollback.sh"), u.rollbackScript(version), 0o755},
		{filepath.Join(units, rollbackService), u.rollbackServiceUnit(version), 0o644},
		{filepath.Join(units, rollbackTimer), u.rollbackTimerUnit(version), 0o644},
	} {
		if err := installFile(w.path, []byte(w.text), w.mode); err != nil {
			return err
		}
	}
	if err := u.run(ctx, "systemctl", "daemon-reload"); err != nil {
		return err
	}
	// A timer left from an update that was never confirmed would keep its
	// old deadline: restart it so the 60 s count from now.
	return u.run(ctx, "systemctl", "restart", rollbackTimer)
}

// disarm stops the rollback timer and removes its units.
func (u *Updater) disarm(ctx context.Context) error {
	var errs []error
	if err := u.run(ctx, "systemctl", "stop", rollbackTimer); err != nil {
		errs = append(errs, err)
	}
	for _, name := range []string{rollbackTimer, rollbackService} {
		if err := os.Remove(filepath.Join(u.path("/etc/systemd/system"), name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := u.run(ctx, "systemctl", "daemon-reload"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// undo puts the saved files back after an install failed half way. Nothing
// was restarted yet, so the running services never saw the new files.
func (u *Updater) undo(ctx context.Context, version string, prev map[string][]byte, cause error) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for _, f := range bundleFiles {
		if f.Target == "" {
			continue
		}
		target := u.path(f.Target)
		b, ok := prev[f.Name]
		var err error
		switch {
		case ok:
			err = installFile(target, b, os.FileMode(f.Mode))
		case f.Name == "sudoers-tunnel-agent" && !dirExists(filepath.Dir(target)):
		default:
			err = os.Remove(target)
			if errors.Is(err, os.ErrNotExist) {
				err = nil
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := installFile(u.lib("bundle-version"), prev["VERSION"], 0o644); err != nil {
		errs = append(errs, err)
	}
	if err := u.disarm(ctx); err != nil {
		errs = append(errs, err)
	}
	msg := fmt.Sprintf("%v; the previous files were put back", cause)
	if len(errs) > 0 {
		msg = fmt.Sprintf("%v; putting the previous files back failed too: %v (the rollback timer was stopped: run sh %s by hand)", cause, errors.Join(errs...), u.lib("rollback.sh"))
	}
	u.writeState(UpdateState{State: UpdateFailed, Version: version, Error: msg})
	return errors.New(msg)
}

// pending reports a failure after the switch: the new files are in place
// and the armed timer will put the previous ones back.
func (u *Updater) pending(version string, prev map[string][]byte, cause error) error {
	msg := fmt.Sprintf("%v; bundle %s is installed, and the rollback timer puts bundle %s back within %d s",
		cause, version, strings.TrimSpace(string(prev["VERSION"])), RollbackSeconds)
	u.writeState(UpdateState{State: UpdateFailed, Version: version, Error: msg})
	return errors.New(msg)
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// Confirm is confirm-update: the new agent runs and the control server saw
// it, so the rollback timer goes. LIB/previous stays: the machine keeps the
// previous bundle.
func (u *Updater) Confirm(ctx context.Context) error {
	version := readBundleVersion(u.lib(""), u.Version)
	if err := u.disarm(ctx); err != nil {
		return fmt.Errorf("could not disarm the rollback: %v", err)
	}
	return u.writeState(UpdateState{State: UpdateCurrent, Version: version})
}

// installFile writes data to path atomically: a temporary file beside it
// (its name has a dot, so neither sudo's includedir nor systemd reads it),
// synced, renamed over path, and the directory synced so the rename
// survives a power cut.
func installFile(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".new-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // nothing left after a successful rename
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
