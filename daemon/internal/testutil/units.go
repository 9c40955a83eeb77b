package testutil

import (
	"context"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// MemoryUnits stands in for systemd: it keeps each unit's state in memory
// and every job succeeds (unit names are checked as systemd's manager
// checks them). For a daemon built as Serve builds it where systemd is
// not the init system.
type MemoryUnits struct {
	mu     sync.Mutex
	states map[string]string
}

var _ units.Manager = (*MemoryUnits)(nil)

func (m *MemoryUnits) job(name, state string) error {
	n, err := units.Canonical(name)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.states == nil {
		m.states = map[string]string{}
	}
	if state != "" {
		m.states[n] = state
	}
	return nil
}

func (m *MemoryUnits) Start(_ context.Context, name string) error {
	return m.job(name, "active")
}
func (m *MemoryUnits) Restart(_ context.Context, name string) error {
	return m.job(name, "active")
}
func (m *MemoryUnits) Stop(_ context.Context, name string) error {
	return m.job(name, "inactive")
}
func (m *MemoryUnits) Reload(_ context.Context, name string) error { return m.job(name, "") }
func (m *MemoryUnits) Enable(_ context.Context, name string) error { return m.job(name, "") }
func (m *MemoryUnits) Disable(_ context.Context, name string) error {
	return m.job(name, "")
}

// State is the unit's state: active once started, else inactive.
func (m *MemoryUnits) State(_ context.Context, name string) (units.State, error) {
	n, err := units.Canonical(name)
	if err != nil {
		return units.State{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.states[n]
	if st == "" {
		st = "inactive"
	}
	return units.State{Name: n, LoadState: "loaded", ActiveState: st, Since: time.Now()}, nil
}
