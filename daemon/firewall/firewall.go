// Package firewall manages the firewall mode of spec §3: `svc` installs and
// maintains our own nftables table (inet tunnelsvc), `manual` and `none`
// leave the firewall to the operator. Other tables and tools (ufw,
// firewalld, iptables) are only ever looked at, never changed.
package firewall

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tunnelsvc/tunnelsvc/daemon/atomicfile"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Modes (spec §2, "Firewall mode").
const (
	ModeSvc    = "svc"
	ModeManual = "manual"
	ModeNone   = "none"
)

// ErrBadMode is the spec's 400 message for an unknown mode.
var ErrBadMode = errors.New("mode must be one of: svc, manual, none")

// ValidMode checks a requested mode.
func ValidMode(mode string) error {
	switch mode {
	case ModeSvc, ModeManual, ModeNone:
		return nil
	}
	return ErrBadMode
}

// Progress receives the log lines of a background operation (the log
// WebSocket in production). Done is called exactly once, last.
type Progress interface {
	Line(level, text string)
	Done(ok bool)
}

// ApplyError is nft refusing or failing; Msg carries nft's own words.
type ApplyError struct{ Msg string }

func (e *ApplyError) Error() string { return e.Msg }

// Options configure a Service.
type Options struct {
	Store *store.Store
	Run   cmdrun.Runner
	// Ports returns the current tunnels and settings the ruleset follows.
	Ports func(ctx context.Context) (Ports, error)
	// RulesetPath is where the applied svc ruleset is kept
	// (/etc/tunnelsvc/firewall.nft, rooted at --system-root).
	RulesetPath string
	Log         *slog.Logger
	// Edge is this edge's name: the mode is each edge's own (its host's
	// firewall).
	Edge string
}

// Service owns the firewall mode.
type Service struct {
	// settings holds the mode, under the one key status reads it by.
	settings localsetup.Settings
	run      cmdrun.Runner
	ports    func(ctx context.Context) (Ports, error)
	path     string
	log      *slog.Logger
	mu       sync.Mutex
}

// New builds a Service.
func New(o Options) *Service {
	s := &Service{settings: localsetup.Settings{Store: o.Store, Edge: o.Edge}, run: o.Run, ports: o.Ports, path: o.RulesetPath, log: o.Log}
	if s.run == nil {
		s.run = cmdrun.Exec{}
	}
	if s.path == "" {
		s.path = "/etc/tunnelsvc/firewall.nft"
	}
	if s.ports == nil {
		s.ports = func(context.Context) (Ports, error) { return Ports{}, nil }
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s
}

// RulesetPath is the file the svc ruleset is kept in.
func (s *Service) RulesetPath() string { return s.path }

// Mode returns the saved mode; `none` until one is chosen.
func (s *Service) Mode(ctx context.Context) (string, error) {
	m, err := s.settings.FirewallMode(ctx)
	if m == "" && err == nil {
		return ModeNone, nil
	}
	return m, err
}

// SetMode switches to `manual` or `none` synchronously. Leaving `svc`
// deletes our table (and nothing else) first; if nft fails the mode stays.
func (s *Service) SetMode(ctx context.Context, mode string) error {
	if err := ValidMode(mode); err != nil {
		return err
	}
	if mode == ModeSvc {
		return errors.New("svc mode is entered with EnterSvc")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.Mode(ctx)
	if err != nil {
		return err
	}
	if cur == ModeSvc {
		if err := s.nftFile(ctx, removeScript, false, "could not delete table inet tunnelsvc: "); err != nil {
			return err
		}
		if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("firewall: could not remove the svc ruleset file", "path", s.path, "err", err)
		}
		s.log.Info("firewall: left svc mode; table inet tunnelsvc deleted", "mode", mode)
	}
	return s.settings.SetFirewallMode(ctx, mode)
}

// EnterSvc is the background half of configure `svc`: render the ruleset,
// check it with `nft -c`, apply it atomically with `nft -f`, and only then
// save the mode. Every step goes to p.
func (s *Service) EnterSvc(ctx context.Context, p Progress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p.Line("info", "firewall: taking over with our own nftables table inet tunnelsvc; other tables stay as they are")
	if err := s.apply(ctx, p); err != nil {
		p.Line("error", "firewall: "+err.Error())
		p.Done(false)
		return
	}
	if err := s.settings.SetFirewallMode(ctx, ModeSvc); err != nil {
		p.Line("error", "firewall: the ruleset is applied but the mode could not be saved: "+err.Error())
		p.Done(false)
		return
	}
	p.Line("info", "firewall: mode svc is active; undo by hand with: nft delete table inet tunnelsvc")
	p.Done(true)
}

// Desired is the ruleset Reconcile would apply now; inUse is false unless
// the mode is svc (the operator's own firewall, or none).
func (s *Service) Desired(ctx context.Context) ([]byte, bool, error) {
	mode, err := s.Mode(ctx)
	if err != nil || mode != ModeSvc {
		return nil, false, err
	}
	ports, err := s.ports(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("reading tunnels and settings: %w", err)
	}
	script, err := Render(ports)
	return []byte(script), err == nil, err
}

// Reconcile re-renders and re-applies our table when the mode is `svc`;
// call it whenever tunnels or the server-port settings change.
func (s *Service) Reconcile(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	mode, err := s.Mode(ctx)
	if err != nil || mode != ModeSvc {
		return err
	}
	return s.apply(ctx, logProgress{s.log})
}

func (s *Service) apply(ctx context.Context, p Progress) error {
	ports, err := s.ports(ctx)
	if err != nil {
		return fmt.Errorf("reading tunnels and settings: %w", err)
	}
	script, err := Render(ports)
	if err != nil {
		return err
	}
	p.Line("info", fmt.Sprintf("firewall: ruleset for control port %d, %d private and %d public tunnel ports, dashboard port %d (private: %t)",
		ports.ControlPort, len(ports.PrivatePorts), len(ports.PublicTCPPorts)+len(ports.PublicUDPPorts), ports.DashboardPort, ports.DashboardPrivate))
	old, oldErr := os.ReadFile(s.path)
	if err := s.nftFile(ctx, script, true, "nft -c refused the ruleset: "); err != nil {
		return err
	}
	p.Line("info", "firewall: nft -c accepted the ruleset")
	if err := atomicfile.Write(s.path, []byte(script), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", s.path, err)
	}
	if res := s.run.Run(ctx, "nft", "-f", s.path); res.Err != nil {
		if oldErr == nil {
			atomicfile.Write(s.path, old, 0o600)
		} else {
			os.Remove(s.path)
		}
		return nftError("nft -f failed: ", res, s.path)
	}
	p.Line("info", "firewall: applied "+s.path+" with nft -f")
	return nil
}

// nftFile runs an nft script from a temporary file beside the ruleset
// (only checking it when checkOnly); a failure carries nft's words after
// prefix.
func (s *Service) nftFile(ctx context.Context, script string, checkOnly bool, prefix string) error {
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".firewall-*.nft")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(script); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	args := []string{"-f", f.Name()}
	if checkOnly {
		args = []string{"-c", "-f", f.Name()}
	}
	if res := s.run.Run(ctx, "nft", args...); res.Err != nil {
		err := nftError(prefix, res, f.Name())
		if ae, ok := err.(*ApplyError); ok {
			ae.Msg = strings.ReplaceAll(ae.Msg, f.Name(), s.path)
		}
		return err
	}
	return nil
}

// nftError carries nft's message line (cmdrun.Message); own is the file nft
// was given.
func nftError(prefix string, res cmdrun.Result, own ...string) error {
	if errors.Is(res.Err, cmdrun.ErrNotInstalled) {
		return &ApplyError{Msg: "nftables is not installed (apt-get install nftables)"}
	}
	return &ApplyError{Msg: prefix + cmdrun.Message("nft", res, own...)}
}

type logProgress struct{ log *slog.Logger }

func (l logProgress) Line(level, text string) {
	if level == "error" {
		l.log.Error(text)
		return
	}
	l.log.Info(text)
}
func (l logProgress) Done(bool) {}
