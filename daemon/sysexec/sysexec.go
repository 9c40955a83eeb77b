// Package sysexec is the one door to system tools (caddy, frps, nft,
// fail2ban-client) and to the files the daemon deploys. Domain packages take
// a Runner so tests can watch or replace the calls; the real one runs the
// tool and keeps its own words for the error.
package sysexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Runner runs a command and returns its combined output.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// Exec is the real Runner.
type Exec struct{}

// ToolError is a failed tool run; Output is what the tool said.
type ToolError struct {
	Tool   string
	Output string
	Err    error
}

func (e *ToolError) Error() string {
	out := strings.TrimSpace(e.Output)
	if out == "" {
		return fmt.Sprintf("%s: %v", e.Tool, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Tool, out)
}

func (e *ToolError) Unwrap() error { return e.Err }

// Run runs name with args; a non-zero exit is a *ToolError with the output.
func (Exec) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return buf.Bytes(), &ToolError{Tool: filepath.Base(name), Output: name + " is not installed", Err: err}
		}
		return buf.Bytes(), &ToolError{Tool: filepath.Base(name), Output: buf.String(), Err: err}
	}
	return buf.Bytes(), nil
}

// WriteFileAtomic writes data to path through a temporary file in the same
// directory and a rename, so readers see the old file or the new one, never
// half of one.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// TempFileBeside writes data to a new temporary file next to path (same
// file system, so it can be renamed over path after a check) and returns
// its name. The caller removes it.
func TempFileBeside(path string, data []byte) (string, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".check-*")
	if err != nil {
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), f.Close()
}
