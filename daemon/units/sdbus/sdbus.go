// Package sdbus implements units.Manager over systemd's D-Bus API: the system
// bus when a bus daemon runs, else systemd's private socket. It never shells
// out to systemctl.
package sdbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"

	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// DefaultTimeout bounds one job (start, stop, restart, reload) from enqueue
// to result: longer than a unit's usual start, shorter than a browser's
// patience.
const DefaultTimeout = 60 * time.Second

// Options configure a Manager; zero fields take defaults.
type Options struct {
	// Timeout bounds each job; DefaultTimeout when zero.
	Timeout time.Duration
	// Booted reports whether systemd is the init system (sd_booted: the
	// directory /run/systemd/system exists).
	Booted func() bool
	// Dial opens a connection to systemd. The default tries the system bus
	// and falls back to /run/systemd/private when no bus daemon runs. The
	// context it is given lives as long as the Manager (until Close): the
	// connection is shared by every caller, so it must never be tied to the
	// request that happened to open it.
	Dial func(context.Context) (*sd.Conn, error)
	Log  *slog.Logger
}

// Manager is a units.Manager over D-Bus. It connects lazily, and again
// whenever the connection has closed (systemd or the bus restarted).
type Manager struct {
	timeout time.Duration
	booted  func() bool
	dial    func(context.Context) (*sd.Conn, error)
	log     *slog.Logger

	// life is the connection's context: it ends with Close, never with a
	// caller's request.
	life     context.Context
	endLife  context.CancelFunc
	redials  atomic.Uint64
	mu       sync.Mutex
	conn     *sd.Conn
	dialling chan struct{} // closed when the dial in progress ends
}

var _ units.Manager = (*Manager)(nil)

// New returns a Manager; it does not connect yet.
func New(o Options) *Manager {
	m := &Manager{timeout: o.Timeout, booted: o.Booted, dial: o.Dial, log: o.Log}
	m.life, m.endLife = context.WithCancel(context.Background())
	if m.timeout <= 0 {
		m.timeout = DefaultTimeout
	}
	if m.booted == nil {
		m.booted = Booted
	}
	if m.dial == nil {
		m.dial = Dial
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	return m
}

// Booted reports whether the machine runs systemd as init (sd_booted(3)).
func Booted() bool {
	fi, err := os.Lstat("/run/systemd/system")
	return err == nil && fi.IsDir()
}

// Dial connects through the system bus, or through systemd's private socket
// when the bus daemon is absent (early boot, minimal containers, dbus down).
func Dial(ctx context.Context) (*sd.Conn, error) {
	c, err := sd.NewWithContext(ctx)
	if err == nil {
		return c, nil
	}
	c, err2 := sd.NewSystemdConnectionContext(ctx)
	if err2 == nil {
		return c, nil
	}
	return nil, errors.Join(err, err2)
}

// Close drops the connection, if any; a Manager is not used after Close.
func (m *Manager) Close() {
	m.endLife()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil {
		m.conn.Close()
		m.conn = nil
	}
}

// Reconnects counts the connections opened after the first one: each means
// the previous connection had really closed (the bus or systemd went away).
func (m *Manager) Reconnects() uint64 { return m.redials.Load() }

// unavailable wraps why systemd could not be reached; its text is exactly
// units.ErrUnavailable's so that callers show one clear message.
type unavailable struct{ cause error }

func (e *unavailable) Error() string        { return units.ErrUnavailable.Error() }
func (e *unavailable) Is(target error) bool { return target == units.ErrUnavailable }
func (e *unavailable) Unwrap() error        { return e.cause }

// connection returns a live connection, dialing a new one when there is none
// or the old one has closed. The dial runs under the Manager's lifetime
// context; ctx only bounds how long this caller waits for it, so a caller
// that gives up leaves a connection that the next caller uses.
func (m *Manager) connection(ctx context.Context) (*sd.Conn, error) {
	if !m.booted() {
		return nil, units.ErrUnavailable
	}
	for {
		m.mu.Lock()
		if m.conn != nil && m.conn.Connected() {
			c := m.conn
			m.mu.Unlock()
			return c, nil
		}
		if m.conn != nil {
			n := m.redials.Add(1)
			m.log.Info("systemd connection closed; reconnecting", "reconnects", n)
			m.conn.Close()
			m.conn = nil
		}
		if m.dialling != nil {
			// Another caller is dialling: wait for its result.
			wait := m.dialling
			m.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, &unavailable{cause: ctx.Err()}
			}
		}
		done := make(chan struct{})
		m.dialling = done
		m.mu.Unlock()

		type result struct {
			c   *sd.Conn
			err error
		}
		res := make(chan result, 1)
		go func() {
			c, err := m.dial(m.life)
			m.mu.Lock()
			if err == nil {
				if m.life.Err() != nil {
					c.Close() // closed while dialling
					err = m.life.Err()
					c = nil
				} else {
					m.conn = c
				}
			}
			m.dialling = nil
			m.mu.Unlock()
			close(done)
			res <- result{c, err}
		}()
		select {
		case r := <-res:
			if r.err != nil {
				return nil, &unavailable{cause: r.err}
			}
			return r.c, nil
		case <-ctx.Done():
			return nil, &unavailable{cause: ctx.Err()}
		}
	}
}

// forget drops c if it is the current connection and has closed, so the
// next call dials again.
func (m *Manager) forget(c *sd.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn == c && !c.Connected() {
		c.Close()
		m.conn = nil
		return true
	}
	return false
}

// call runs fn on a live connection; when the call fails because the
// connection closed under it, it reconnects and tries once more.
func (m *Manager) call(ctx context.Context, fn func(*sd.Conn) error) error {
	for attempt := 0; ; attempt++ {
		c, err := m.connection(ctx)
		if err != nil {
			return err
		}
		err = fn(c)
		if err == nil || attempt > 0 || !m.forget(c) {
			return err
		}
	}
}

type jobFunc func(c *sd.Conn, ctx context.Context, name, mode string, ch chan<- string) (int, error)

// job enqueues one job and waits for its result: "done" or a *JobError.
// After a failed job the unit's failed state is reset, so that systemd's
// start rate limit does not block the operator's next attempt.
func (m *Manager) job(ctx context.Context, op, name string, start jobFunc) error {
	unit, err := units.Canonical(name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	// Buffer 1: go-systemd delivers the result while holding its job lock;
	// an unbuffered channel nobody reads any more (timeout) would wedge the
	// connection for every later job.
	ch := make(chan string, 1)
	var conn *sd.Conn
	err = m.call(ctx, func(c *sd.Conn) error {
		conn = c
		_, err := start(c, ctx, unit, "replace", ch)
		return err
	})
	if err != nil {
		if errors.Is(err, units.ErrUnavailable) {
			return err
		}
		return fmt.Errorf("%s %s: %w", op, unit, err)
	}
	select {
	case result := <-ch:
		if result == "done" {
			m.log.Info("unit job done", "op", op, "unit", unit)
			return nil
		}
		m.resetFailed(conn, unit)
		m.log.Warn("unit job failed", "op", op, "unit", unit, "result", result)
		return &units.JobError{Op: op, Unit: unit, Result: result}
	case <-ctx.Done():
		// A closed connection never delivers the result; drop it so the
		// next call reconnects.
		m.forget(conn)
		m.resetFailed(conn, unit)
		return &units.JobError{Op: op, Unit: unit, Result: fmt.Sprintf("gave no result within %s", m.timeout)}
	}
}

func (m *Manager) resetFailed(c *sd.Conn, unit string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c == nil || !c.Connected() {
		return
	}
	if err := c.ResetFailedUnitContext(ctx, unit); err != nil {
		// Not failed (a stop that timed out, say) is not worth a warning.
		m.log.Debug("reset-failed", "unit", unit, "err", err)
	}
}

// Start starts the unit (and what it requires).
func (m *Manager) Start(ctx context.Context, name string) error {
	return m.job(ctx, "start", name, (*sd.Conn).StartUnitContext)
}

// Stop stops the unit.
func (m *Manager) Stop(ctx context.Context, name string) error {
	return m.job(ctx, "stop", name, (*sd.Conn).StopUnitContext)
}

// Restart stops and starts the unit, starting it if it was not running.
func (m *Manager) Restart(ctx context.Context, name string) error {
	return m.job(ctx, "restart", name, (*sd.Conn).RestartUnitContext)
}

// Reload asks the unit to reload its configuration (ExecReload=).
func (m *Manager) Reload(ctx context.Context, name string) error {
	return m.job(ctx, "reload", name, (*sd.Conn).ReloadUnitContext)
}

// Enable makes the unit start at boot, then reloads systemd's configuration
// as `systemctl enable` does.
func (m *Manager) Enable(ctx context.Context, name string) error {
	return m.unitFiles(ctx, "enable", name, func(c *sd.Conn, unit string) error {
		_, _, err := c.EnableUnitFilesContext(ctx, []string{unit}, false, false)
		return err
	})
}

// Disable stops the unit from starting at boot (it keeps running).
func (m *Manager) Disable(ctx context.Context, name string) error {
	return m.unitFiles(ctx, "disable", name, func(c *sd.Conn, unit string) error {
		_, err := c.DisableUnitFilesContext(ctx, []string{unit}, false)
		return err
	})
}

func (m *Manager) unitFiles(ctx context.Context, op, name string, fn func(*sd.Conn, string) error) error {
	unit, err := units.Canonical(name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	err = m.call(ctx, func(c *sd.Conn) error {
		if err := fn(c, unit); err != nil {
			return err
		}
		return c.ReloadContext(ctx)
	})
	if err != nil && !errors.Is(err, units.ErrUnavailable) {
		return fmt.Errorf("%s %s: %w", op, unit, err)
	}
	return err
}

// State reads the unit's and its service's properties.
func (m *Manager) State(ctx context.Context, name string) (units.State, error) {
	unit, err := units.Canonical(name)
	if err != nil {
		return units.State{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	var props, svc map[string]any
	err = m.call(ctx, func(c *sd.Conn) error {
		var err error
		if props, err = c.GetUnitPropertiesContext(ctx, unit); err != nil {
			return err
		}
		svc, err = c.GetUnitTypePropertiesContext(ctx, unit, "Service")
		return err
	})
	if err != nil {
		if errors.Is(err, units.ErrUnavailable) {
			return units.State{}, err
		}
		return units.State{}, fmt.Errorf("state of %s: %w", unit, err)
	}
	s := units.State{
		Name:          unit,
		LoadState:     str(props["LoadState"]),
		ActiveState:   str(props["ActiveState"]),
		SubState:      str(props["SubState"]),
		UnitFileState: str(props["UnitFileState"]),
	}
	if us, ok := props["StateChangeTimestamp"].(uint64); ok && us > 0 {
		s.Since = time.UnixMicro(int64(us)).UTC()
	}
	if id, ok := props["InvocationID"].([]byte); ok && len(id) > 0 {
		s.InvocationID = fmt.Sprintf("%x", id)
	}
	if pid, ok := svc["MainPID"].(uint32); ok {
		s.MainPID = pid
	}
	// systemd's "UID" is the uid it resolved at the start, UINT32_MAX when unset.
	if uid, ok := svc["UID"].(uint32); ok && uid != math.MaxUint32 {
		s.UID = &uid
	}
	return s, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
