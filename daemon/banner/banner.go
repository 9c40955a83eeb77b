// Package banner manages the ban tool (fail2ban, the spec's `banner`): its
// settings, the jail and filter files we own, status, unban and whitelist.
// Every fail2ban command goes through a cmdrun.Runner and every reload
// through a UnitControl, so tests run a private fail2ban-server and the API
// layer never reaches the OS.
package banner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/tunnelsvc/tunnelsvc/daemon/atomicfile"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Unit is fail2ban's systemd unit.
const Unit = "fail2ban.service"

// DefaultConfDir is fail2ban's configuration directory.
const DefaultConfDir = "/etc/fail2ban"

// UnitControl is the slice of the systemd unit layer this package needs.
type UnitControl interface {
	// ReloadOrRestart reloads a running unit and starts a stopped one.
	ReloadOrRestart(ctx context.Context, name string) error
}

// Progress receives the log lines of a background operation (the log
// WebSocket in production). Done is called exactly once, last.
type Progress interface {
	Line(level, text string)
	Done(ok bool)
}

// ErrNoSystemd is reported when there is no unit layer to reload fail2ban.
var ErrNoSystemd = errors.New("systemd is not available")

// ApplyError is a failure of fail2ban itself (a refused config, a failed
// reload); Msg is fail2ban's own words.
type ApplyError struct{ Msg string }

func (e *ApplyError) Error() string { return e.Msg }

// Options configure a Service.
type Options struct {
	Store *store.Store
	Run   cmdrun.Runner
	// Units reloads fail2ban; nil means "no systemd".
	Units UnitControl
	// ConfDir is fail2ban's configuration directory (/etc/fail2ban, rooted
	// at --system-root). We write only jail.d/tunnelsvc.local and
	// filter.d/tunnelsvc-auth.conf inside it.
	ConfDir string
	// Socket is fail2ban-server's socket; empty means fail2ban-client's default.
	Socket  string
	Sources Sources
	Log     *slog.Logger
}

// Service is the ban tool's manager.
type Service struct {
	store   *store.Store
	run     cmdrun.Runner
	units   UnitControl
	confDir string
	socket  string
	sources Sources
	log     *slog.Logger
	// mu serializes everything that writes the managed files.
	mu sync.Mutex
	// facts keeps what fail2ban-client --version and python3's import
	// check said while those files are unchanged (only answers of an
	// installed part: a missing one is asked again each time, so
	// installing it shows at once).
	facts cmdrun.Memo
}

// New builds a Service.
func New(o Options) *Service {
	s := &Service{store: o.Store, run: o.Run, units: o.Units, confDir: o.ConfDir, socket: o.Socket, sources: o.Sources, log: o.Log}
	if s.run == nil {
		s.run = cmdrun.Exec{}
	}
	if s.confDir == "" {
		s.confDir = DefaultConfDir
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s
}

// JailPath is the managed jail file.
func (s *Service) JailPath() string { return filepath.Join(s.confDir, "jail.d", "tunnelsvc.local") }

// FilterPath is the managed filter file.
func (s *Service) FilterPath() string {
	return filepath.Join(s.confDir, "filter.d", AuthJail+".conf")
}

// client runs fail2ban-client against our socket.
func (s *Service) client(ctx context.Context, args ...string) cmdrun.Result {
	if s.socket != "" {
		args = append([]string{"-s", s.socket}, args...)
	}
	return s.run.Run(ctx, "fail2ban-client", args...)
}

// managed reports whether setup-banner has written our jail file.
func (s *Service) managed() bool {
	_, err := os.Stat(s.JailPath())
	return err == nil
}

func (s *Service) params(ctx context.Context, c *Config, wl []string) (JailParams, error) {
	p := JailParams{Sources: s.sources}
	if c != nil {
		p.Config = *c
	} else {
		cur, err := s.Config(ctx)
		if err != nil {
			return p, err
		}
		p.Config = cur
	}
	if wl != nil {
		p.Whitelist = wl
	} else {
		cur, err := s.Whitelist(ctx)
		if err != nil {
			return p, err
		}
		p.Whitelist = cur
	}
	return p, nil
}

// SetConfig validates and saves c. When the managed jail exists, the new
// file is checked by fail2ban, written and fail2ban reloaded first; any
// failure leaves file, setting and fail2ban as they were.
func (s *Service) SetConfig(ctx context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.applyIfManaged(ctx, &c, nil); err != nil {
		return err
	}
	return saveJSON(ctx, s.store, keyConfig, c)
}

// AddWhitelist adds an address or CIDR; it reports false when the entry was
// already there.
func (s *Service) AddWhitelist(ctx context.Context, entry string) (string, bool, error) {
	e, err := NormalizeEntry(entry)
	if err != nil {
		return "", false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	list, err := s.Whitelist(ctx)
	if err != nil {
		return "", false, err
	}
	list, added := addEntry(list, e)
	if !added {
		return e, false, nil
	}
	if err := s.applyIfManaged(ctx, nil, list); err != nil {
		return "", false, err
	}
	return e, true, saveJSON(ctx, s.store, keyWhitelist, list)
}

// RemoveWhitelist removes an entry; an entry that is not there is bad input.
func (s *Service) RemoveWhitelist(ctx context.Context, entry string) (string, error) {
	e, err := NormalizeEntry(entry)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	list, err := s.Whitelist(ctx)
	if err != nil {
		return "", err
	}
	kept := make([]string, 0, len(list))
	for _, x := range list {
		if x != e {
			kept = append(kept, x)
		}
	}
	if len(kept) == len(list) {
		return "", invalid("%s is not in the whitelist", e)
	}
	if err := s.applyIfManaged(ctx, nil, kept); err != nil {
		return "", err
	}
	return e, saveJSON(ctx, s.store, keyWhitelist, kept)
}

// applyIfManaged rewrites and reloads the managed jail with c and wl (nil
// meaning "as saved") when setup-banner has run; before that the settings
// are only saved and take effect at setup.
func (s *Service) applyIfManaged(ctx context.Context, c *Config, wl []string) error {
	if !s.managed() {
		return nil
	}
	p, err := s.params(ctx, c, wl)
	if err != nil {
		return err
	}
	return s.apply(ctx, p, nil)
}

// apply checks the rendered files with fail2ban, writes them atomically and
// reloads fail2ban. A failed reload puts the previous files back.
func (s *Service) apply(ctx context.Context, p JailParams, progress Progress) error {
	line := func(level, text string) {
		if progress != nil {
			progress.Line(level, text)
		}
	}
	if s.units == nil {
		return ErrNoSystemd
	}
	jail, err := RenderJail(p)
	if err != nil {
		return err
	}
	files := map[string][]byte{s.FilterPath(): []byte(FilterText), s.JailPath(): []byte(jail)}
	line("info", "checking the configuration with fail2ban-client --test")
	if err := s.check(ctx, files); err != nil {
		return err
	}
	line("info", "fail2ban accepted the configuration")
	old := map[string][]byte{}
	for path := range files {
		if b, err := os.ReadFile(path); err == nil {
			old[path] = b
		}
	}
	// The filter first: the jail refers to it.
	for _, path := range []string{s.FilterPath(), s.JailPath()} {
		if err := atomicfile.Write(path, files[path], 0o644); err != nil {
			s.restore(files, old)
			return fmt.Errorf("write %s: %w", path, err)
		}
		line("info", "wrote "+path)
	}
	line("info", "reloading "+Unit)
	if err := s.units.ReloadOrRestart(ctx, Unit); err != nil {
		s.restore(files, old)
		return &ApplyError{Msg: fmt.Sprintf("reloading %s failed: %v; the previous files were put back", Unit, err)}
	}
	return nil
}

// restore puts back the files apply replaced (and removes new ones).
func (s *Service) restore(files map[string][]byte, old map[string][]byte) {
	for path := range files {
		var err error
		if b, ok := old[path]; ok {
			err = atomicfile.Write(path, b, 0o644)
		} else {
			err = os.Remove(path)
			if errors.Is(err, os.ErrNotExist) {
				err = nil
			}
		}
		if err != nil {
			s.log.Error("ban tool: could not restore a managed file", "path", path, "err", err)
		}
	}
}
