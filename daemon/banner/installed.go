package banner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
)

// Installation says whether fail2ban is there to be used. It is the one
// answer the status, the set-up and the overview share, so none of them
// can say installed while another says not.
type Installation struct {
	Installed bool
	// Version is what fail2ban-client --version says (installed only).
	Version string
	// Problem says why it cannot be used, and what to do (not installed
	// only).
	Problem string
}

// MissingPart is a package fail2ban needs here that is not installed, and
// what is lost without it (the same shape as the overview's list).
type MissingPart struct {
	Package   string `json:"package"`
	NeededFor string `json:"needed_for"`
}

// JournalPart is python3-systemd: fail2ban reads the systemd journal
// through it, and our jails use the journal (backend = systemd).
var JournalPart = MissingPart{"python3-systemd", "the ban tool's jails, which read the systemd journal (fail2ban backend = systemd)"}

// NotInstalled is Problem when fail2ban-client is missing.
const NotInstalled = "fail2ban is not installed (apt-get install fail2ban)"

// configProblem says what is wrong with fail2ban's configuration
// directory ("" when it has fail2ban's own jail.conf).
func (s *Service) configProblem() string {
	if _, err := os.Stat(filepath.Join(s.confDir, "jail.conf")); err == nil {
		return ""
	}
	if s.confDir != DefaultConfDir {
		// --system-root (make run): the host's fail2ban is not the one
		// this daemon configures.
		return fmt.Sprintf("fail2ban is not installed under this daemon's system root: %s has no jail.conf "+
			"(copy %s there, or run without --system-root)", s.confDir, DefaultConfDir)
	}
	return fmt.Sprintf("fail2ban is not installed: %s has no jail.conf (its package's configuration is missing: "+
		"apt-get install --reinstall -o Dpkg::Options::=--force-confmiss fail2ban)", s.confDir)
}

// Installed checks that fail2ban-client runs and that the configuration
// directory holds fail2ban's own jail.conf: the set-up needs both. An
// error is a failure to ask (fail2ban-client there but failing).
func (s *Service) Installed(ctx context.Context) (Installation, error) {
	version, known := s.facts.Get(s.run, "version")
	if !known {
		res := s.run.Run(ctx, "fail2ban-client", "--version")
		if errors.Is(res.Err, cmdrun.ErrNotInstalled) {
			return Installation{Problem: NotInstalled}, nil
		}
		if res.Err != nil {
			return Installation{}, fmt.Errorf("fail2ban-client --version: %s", res.Words())
		}
		version = strings.TrimSpace(res.Stdout)
		s.facts.Put(s.run, "version", version, "fail2ban-client")
	}
	if p := s.configProblem(); p != "" {
		return Installation{Problem: p}, nil
	}
	return Installation{Installed: true, Version: version}, nil
}

// journalCheckTimeout bounds the python3 import check.
const journalCheckTimeout = 5 * time.Second

// Missing lists what an installed fail2ban lacks here: python3-systemd,
// without which the journal-reading jails cannot start. It asks python3
// to import systemd.journal, as fail2ban will.
func (s *Service) Missing(ctx context.Context) []MissingPart {
	if _, known := s.facts.Get(s.run, "journal"); known {
		return []MissingPart{}
	}
	ctx, cancel := context.WithTimeout(ctx, journalCheckTimeout)
	defer cancel()
	res := s.run.Run(ctx, "python3", "-c", "import systemd.journal; print(systemd.journal.__file__)")
	if res.Err != nil {
		return []MissingPart{JournalPart}
	}
	// Kept while python3 and the module it imported are the same files.
	s.facts.Put(s.run, "journal", "", "python3", strings.TrimSpace(res.Stdout))
	return []MissingPart{}
}

// Parts is what the overview lists of the ban tool: whether fail2ban is
// installed (Installed) and, when it is, whether it can read the journal.
func (s *Service) Parts(ctx context.Context) (installed, journal bool) {
	in, err := s.Installed(ctx)
	if err != nil || !in.Installed {
		return false, false
	}
	return true, len(s.Missing(ctx)) == 0
}
