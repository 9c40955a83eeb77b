package sdbus

import (
	"context"
	"errors"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"

	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// Every call fails with exactly `systemd is not available`, whether systemd
// is not the init system or its bus cannot be reached, and a name off the
// allow-list is refused before any dial.
func TestNoSystemd(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		booted bool
	}{{"not booted with systemd", false}, {"bus unreachable", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dials := 0
			m := New(Options{
				Booted: func() bool { return tc.booted },
				Dial: func(context.Context) (*sd.Conn, error) {
					dials++
					return nil, errors.New("dial unix /run/systemd/private: connect: no such file or directory")
				},
			})
			calls := map[string]func(string) error{
				"start":   func(n string) error { return m.Start(ctx, n) },
				"stop":    func(n string) error { return m.Stop(ctx, n) },
				"restart": func(n string) error { return m.Restart(ctx, n) },
				"reload":  func(n string) error { return m.Reload(ctx, n) },
				"enable":  func(n string) error { return m.Enable(ctx, n) },
				"disable": func(n string) error { return m.Disable(ctx, n) },
				"state":   func(n string) error { _, err := m.State(ctx, n); return err },
			}
			for op, call := range calls {
				err := call("revtunnel-server")
				if err == nil || err.Error() != "systemd is not available" || !errors.Is(err, units.ErrUnavailable) {
					t.Fatalf("%s: %v", op, err)
				}
				before := dials
				var na *units.NotAllowedError
				if err := call("sshd.service"); !errors.As(err, &na) {
					t.Fatalf("%s sshd: %v", op, err)
				}
				if dials != before {
					t.Fatalf("%s of a refused unit dialed systemd", op)
				}
			}
			if tc.booted && dials != len(calls) {
				t.Fatalf("dials = %d, want one per call (%d)", dials, len(calls))
			}
			if !tc.booted && dials != 0 {
				t.Fatalf("dialed %d times without systemd", dials)
			}
		})
	}
}

// The shared connection must outlive the request that opened it: the
// context a dial receives is the Manager's own, which ends only with Close.
// (A connection opened with a request's context closed when that request
// ended, failing every job other callers had in flight on it.)
func TestDialOutlivesTheCaller(t *testing.T) {
	var dialled []context.Context
	m := New(Options{
		Booted: func() bool { return true },
		Dial: func(ctx context.Context) (*sd.Conn, error) {
			dialled = append(dialled, ctx)
			return nil, errors.New("no bus here")
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := m.State(ctx, "caddy"); !errors.Is(err, units.ErrUnavailable) {
		t.Fatalf("State: %v", err)
	}
	cancel()
	if len(dialled) != 1 {
		t.Fatalf("dials = %d, want 1", len(dialled))
	}
	if err := dialled[0].Err(); err != nil {
		t.Fatalf("the connection's context ended with the request: %v", err)
	}
	m.Close()
	if dialled[0].Err() == nil {
		t.Fatal("the connection's context outlived Close")
	}
}

// A caller whose own deadline passes while the dial hangs gets
// "systemd is not available" at its deadline, not at the dial's end.
func TestDialWaitHonoursCallerDeadline(t *testing.T) {
	release := make(chan struct{})
	m := New(Options{
		Booted: func() bool { return true },
		Dial: func(ctx context.Context) (*sd.Conn, error) {
			<-release
			return nil, errors.New("bus wedged")
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() { _, err := m.State(ctx, "caddy"); errc <- err }()
	select {
	case err := <-errc:
		if !errors.Is(err, units.ErrUnavailable) {
			t.Fatalf("State: %v", err)
		}
		close(release)
	case <-time.After(5 * time.Second):
		close(release) // let the dial end so the goroutine does too
		<-errc
		t.Fatal("the caller waited past its deadline for a hung dial")
	}
}
