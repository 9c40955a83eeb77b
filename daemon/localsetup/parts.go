package localsetup

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// MissingPart is a recommended package that is not installed, and what the
// operator loses without it. The package only recommends these (the
// product runs without each), so the dashboard must say what is absent.
type MissingPart struct {
	Package   string `json:"package"`
	NeededFor string `json:"needed_for"`
}

// part is a recommended package, found by a command it installs.
type part struct {
	pkg, command, neededFor string
}

// banToolPart is fail2ban; Service.BanTool, when set, decides whether it
// is there.
var banToolPart = part{"fail2ban", "fail2ban-client", "the ban tool (banning addresses that guess passwords)"}

var recommended = []part{
	{"caddy", "caddy", "publishing web services at https://<name>.<domain> (the web proxy)"},
	{"nftables", "nft", "firewall mode svc (the table inet tunnelsvc)"},
	banToolPart,
}

// python3-systemd lets fail2ban read the journal, which our jails use.
var journalPart = MissingPart{"python3-systemd", "the ban tool's jails, which read the systemd journal (fail2ban backend = systemd)"}

// MissingParts lists the recommended packages that are absent. ToolPath
// (a PATH-like list; empty: $PATH) is where their commands are looked for.
func (s *Service) MissingParts(ctx context.Context) []MissingPart {
	missing := []MissingPart{}
	for _, p := range recommended {
		if s.lookPath(p.command) == "" {
			missing = append(missing, MissingPart{p.pkg, p.neededFor})
		}
	}
	if s.BanTool != nil {
		// The ban tool's own check, so that this list and the Ban tool
		// page agree.
		installed, journal := s.BanTool(ctx)
		missing = slices.DeleteFunc(missing, func(m MissingPart) bool { return m.Package == banToolPart.pkg })
		switch {
		case !installed:
			missing = append(missing, MissingPart{banToolPart.pkg, banToolPart.neededFor})
		case !journal:
			missing = append(missing, journalPart)
		}
		return missing
	}
	if s.lookPath("fail2ban-client") == "" {
		return missing
	}
	py := s.lookPath("python3")
	if py == "" {
		return append(missing, journalPart)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if res := s.Run.Run(ctx, py, "-c", "import systemd.journal"); res.Err != nil {
		missing = append(missing, journalPart)
	}
	return missing
}

func (s *Service) lookPath(command string) string {
	dirs := s.ToolPath
	if dirs == "" {
		dirs = os.Getenv("PATH")
	}
	for _, d := range filepath.SplitList(dirs) {
		if d == "" {
			continue
		}
		p := filepath.Join(d, command)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
