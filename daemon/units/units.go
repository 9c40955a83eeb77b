// Package units is what the daemon may do to systemd units: the allow-list,
// the Manager interface the domain packages (revtunnel, webproxy, banner)
// depend on, and the errors callers tell apart. The D-Bus implementation
// lives in units/sdbus, so that depending on this package pulls in no D-Bus
// code.
package units

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Managed are the only units the daemon touches, by their full names.
var Managed = []string{"revtunnel-server.service", "caddy.service", "fail2ban.service"}

// ErrUnavailable is returned by every call when there is no systemd to talk
// to (a plain `tunnelsvc serve` on a dev box, or a bus that cannot be
// reached). Its text is what the API shows.
var ErrUnavailable = errors.New("systemd is not available")

// UnavailableHint is what the operator can do about ErrUnavailable.
const UnavailableHint = "this daemon was started without systemd (plain `tunnelsvc serve`), so it cannot start or reload caddy, revtunnel-server and fail2ban; " +
	"install the tunnelsvc package and let systemd run it (systemctl enable --now tunnelsvc.socket), or start those services yourself"

// Explain is err's text, followed by UnavailableHint when err is (or
// wraps) ErrUnavailable.
func Explain(err error) string {
	if err == nil {
		return ""
	}
	if errors.Is(err, ErrUnavailable) && !strings.Contains(err.Error(), UnavailableHint) {
		return err.Error() + ": " + UnavailableHint
	}
	return err.Error()
}

// NotAllowedError refuses a unit that is not on the allow-list. It is
// returned before D-Bus is touched.
type NotAllowedError struct{ Name string }

func (e *NotAllowedError) Error() string {
	short := make([]string, len(Managed))
	for i, u := range Managed {
		short[i] = strings.TrimSuffix(u, ".service")
	}
	return fmt.Sprintf("unit %q is not managed by tunnelsvc (allowed: %s)", e.Name, strings.Join(short, ", "))
}

// JobError is a job systemd ran and that did not end in "done" (or never
// ended within the timeout). Result is systemd's word: canceled, timeout,
// failed, dependency, skipped, or "no result within ..." for our own timeout.
type JobError struct {
	Op, Unit, Result string
}

func (e *JobError) Error() string { return fmt.Sprintf("%s %s: job %s", e.Op, e.Unit, e.Result) }

// Canonical returns the full unit name for an allow-listed name given with or
// without ".service", or a *NotAllowedError.
func Canonical(name string) (string, error) {
	full := name
	if !strings.HasSuffix(full, ".service") {
		full += ".service"
	}
	for _, u := range Managed {
		if u == full {
			return u, nil
		}
	}
	return "", &NotAllowedError{Name: name}
}

// State is what systemd says about one unit.
type State struct {
	Name string `json:"name"`
	// LoadState is "loaded", or "not-found" when the unit is not installed.
	LoadState string `json:"load_state"`
	// ActiveState is active, reloading, inactive, failed, activating or deactivating.
	ActiveState string `json:"active_state"`
	// SubState is the unit type's finer state (running, exited, dead, ...).
	SubState string `json:"sub_state"`
	// UnitFileState is enabled, disabled, masked, static, ... (empty when not installed).
	UnitFileState string `json:"unit_file_state"`
	// Since is when ActiveState last changed; zero when it never did.
	Since time.Time `json:"since"`
	// InvocationID changes every time the unit is started.
	InvocationID string `json:"invocation_id"`
	// MainPID is the service's main process, 0 when none runs.
	MainPID uint32 `json:"main_pid"`
	// UID is the uid the service's processes run as (its dynamic user's,
	// for DynamicUser=yes); nil when systemd has none for it (not running,
	// or no User=).
	UID *uint32 `json:"-"`
}

// Manager drives allow-listed units. Names may be given with or without
// ".service"; any other name yields *NotAllowedError. Without systemd every
// call returns an error matching ErrUnavailable. Start, Stop, Restart and
// Reload return when systemd's job is done, and a *JobError when it did not
// end in "done".
type Manager interface {
	Start(ctx context.Context, name string) error
	Stop(ctx context.Context, name string) error
	Restart(ctx context.Context, name string) error
	Reload(ctx context.Context, name string) error
	// Enable and Disable change whether the unit starts at boot (like
	// `systemctl enable`, including the daemon reload); they do not start or
	// stop it.
	Enable(ctx context.Context, name string) error
	Disable(ctx context.Context, name string) error
	State(ctx context.Context, name string) (State, error)
}

// Unavailable is the Manager of a machine without systemd.
type Unavailable struct{}

var _ Manager = Unavailable{}

func (Unavailable) check(name string) error {
	if _, err := Canonical(name); err != nil {
		return err
	}
	return ErrUnavailable
}

func (u Unavailable) Start(_ context.Context, name string) error   { return u.check(name) }
func (u Unavailable) Stop(_ context.Context, name string) error    { return u.check(name) }
func (u Unavailable) Restart(_ context.Context, name string) error { return u.check(name) }
func (u Unavailable) Reload(_ context.Context, name string) error  { return u.check(name) }
func (u Unavailable) Enable(_ context.Context, name string) error  { return u.check(name) }
func (u Unavailable) Disable(_ context.Context, name string) error { return u.check(name) }
func (u Unavailable) State(_ context.Context, name string) (State, error) {
	return State{}, u.check(name)
}
