// Package cmdrun runs the system tools the domain packages drive (nft,
// fail2ban-client, ufw...). Domain packages take a Runner so tests can point
// them at a network namespace or a private fail2ban instance, and so the API
// layer never touches os/exec.
package cmdrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// DefaultTimeout bounds every command: a hung tool must not hang a request.
const DefaultTimeout = 30 * time.Second

// ErrNotInstalled is wrapped by Result.Err when the program is not on PATH.
var ErrNotInstalled = errors.New("not installed")

// Result is what a command printed and how it ended.
type Result struct {
	Stdout, Stderr string
	// Err is nil when the command exited 0.
	Err error
}

// Runner runs one program with arguments (never through a shell).
type Runner interface {
	Run(ctx context.Context, name string, args ...string) Result
}

// Exec runs programs on this machine.
type Exec struct {
	// Prefix is prepended to every command line, e.g. ["ip", "netns", "exec",
	// "ns1"] to run everything inside a network namespace.
	Prefix []string
	// Timeout defaults to DefaultTimeout.
	Timeout time.Duration
}

var _ Runner = Exec{}

// Run implements Runner.
func (e Exec) Run(ctx context.Context, name string, args ...string) Result {
	if _, err := exec.LookPath(name); err != nil {
		return Result{Err: fmt.Errorf("%s: %w", name, ErrNotInstalled)}
	}
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv := append(append([]string{}, e.Prefix...), name)
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("%s timed out after %s", name, timeout)
	}
	return Result{Stdout: out.String(), Stderr: errOut.String(), Err: err}
}

// Words is the tool's own explanation in one line: the first line of its
// stderr, else of its stdout, else the exit error. For a tool that read a
// config file use Message, which also keeps that file's contents out.
func (r Result) Words() string { return firstLine(r) }

// ToolError is a failed tool run, carrying the tool's own words.
type ToolError struct {
	Tool  string
	Words string
	Err   error
}

func (e *ToolError) Error() string {
	if e.Words == "" {
		return fmt.Sprintf("%s: %v", e.Tool, e.Err)
	}
	return e.Tool + ": " + e.Words
}

func (e *ToolError) Unwrap() error { return e.Err }

// AsError is nil for a successful run, else a *ToolError naming tool whose
// words are Message(tool, r, own...).
func (r Result) AsError(tool string, own ...string) error {
	if r.Err == nil {
		return nil
	}
	return &ToolError{Tool: tool, Words: Message(tool, r, own...), Err: r.Err}
}

// Locator is a Runner that can say which file a program name runs, so a
// caller may keep what the program said while that file is unchanged.
// Exec is one; runners made up in tests are not, and are always asked.
type Locator interface {
	Locate(name string) (string, error)
}

// Locate implements Locator: the file Run would start for name.
func (e Exec) Locate(name string) (string, error) { return exec.LookPath(name) }

// Identity names a file's current contents cheaply: its path, size,
// modification time and inode. It changes when a package upgrade replaces
// the file. "" when the file cannot be read.
func Identity(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%s %d %d %d", path, fi.Size(), fi.ModTime().UnixNano(), ino)
}
