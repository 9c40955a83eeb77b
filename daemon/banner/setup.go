package banner

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// readyTimeout bounds how long Setup waits for fail2ban to answer after the
// reload.
const readyTimeout = 15 * time.Second

// Setup writes the managed filter and jail files from the saved settings,
// checked by fail2ban first, and reloads (or starts) fail2ban. It is the
// background half of POST /api/local/setup-banner: every step goes to p,
// and p.Done reports the outcome.
func (s *Service) Setup(ctx context.Context, p Progress) {
	ok := s.setup(ctx, p)
	p.Done(ok)
}

func (s *Service) setup(ctx context.Context, p Progress) bool {
	fail := func(err error) bool {
		if errors.Is(err, ErrNoSystemd) {
			err = units.ErrUnavailable
		}
		p.Line("error", "ban tool setup failed: "+units.Explain(err))
		return false
	}
	p.Line("info", "setting up the ban tool (fail2ban)")
	// The same check as the status's "installed".
	in, err := s.Installed(ctx)
	if err != nil {
		return fail(err)
	}
	if !in.Installed {
		return fail(errors.New(in.Problem))
	}
	p.Line("info", "found "+in.Version)
	for _, m := range s.Missing(ctx) {
		p.Line("warn", m.Package+" is not installed: fail2ban cannot run "+m.NeededFor+" (apt-get install "+m.Package+")")
	}
	if s.units == nil {
		return fail(ErrNoSystemd)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	params, err := s.params(ctx, nil, nil)
	if err != nil {
		return fail(err)
	}
	if err := s.apply(ctx, params, p); err != nil {
		return fail(err)
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		res := s.client(ctx, "status")
		if res.Err == nil {
			names := parseJailList(res.Stdout)
			p.Line("info", "fail2ban is running with jails: "+strings.Join(names, ", "))
			for _, want := range []string{SSHDJail, AuthJail} {
				found := false
				for _, n := range names {
					found = found || n == want
				}
				if !found {
					return fail(errors.New("jail " + want + " is not running; see fail2ban's log (journalctl -u fail2ban)"))
				}
			}
			p.Line("info", "ban tool set up")
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fail(errors.New("fail2ban did not answer after the reload: " + cmdrun.Message("fail2ban-client", res)))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
