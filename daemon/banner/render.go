package banner

import (
	"fmt"
	"strings"
)

// Names of the managed jails and filter.
const (
	SSHDJail = "sshd"
	AuthJail = "tunnelsvc-auth"
	// DaemonUnit is the unit whose journal the auth jail reads.
	DaemonUnit = "tunnelsvc.service"
)

// FilterText is filter.d/tunnelsvc-auth.conf. It matches the stable line the
// audit package writes for every authentication failure (audit.FailureLine)
// as slog's text handler prints it:
//
//	time=2026-01-02T03:04:05.000Z level=WARN msg="auth failure from 203.0.113.9" kind=LOGIN_FAILED detail=""
//
// The regex is anchored at the start of the line, so text an attacker puts
// into a later field (quoted and escaped by slog) can never match. fail2ban
// cuts the timestamp out before matching, hence `time=\S*`.
const FilterText = `# Managed by tunnelsvc: matches the dashboard's authentication failures.
# Rewritten by "setup-banner"; local edits are lost.
[Definition]
failregex = ^time=\S* level=WARN msg="auth failure from <HOST>"(?: |$)
ignoreregex =
`

// Sources says where each jail reads its log. The zero value is production:
// both jails read the systemd journal.
type Sources struct {
	// SSHDLogPath, when set, makes the sshd jail poll this file instead of
	// the journal.
	SSHDLogPath string
	// AuthLogPath, when set, makes the auth jail poll this file instead of
	// the daemon's journal.
	AuthLogPath string
	// Action, when set, replaces fail2ban's ban action in both jails (tests
	// use `dummy[target=...]` so they never touch the host's firewall).
	Action string
}

// JailParams is everything the managed jail file depends on.
type JailParams struct {
	Config    Config
	Whitelist []string
	Sources   Sources
}

// check refuses anything the jail file cannot carry as it is: the config
// outside its limits, a whitelist entry that is not a normalized address or
// CIDR (validate.IPOrPrefix), and source paths or an action with a line
// break or a '%' (fail2ban's interpolation) in them.
func (p JailParams) check() error {
	if err := p.Config.Validate(); err != nil {
		return err
	}
	for _, e := range p.Whitelist {
		if n, err := NormalizeEntry(e); err != nil || n != e {
			return invalid("whitelist entry %q is not a normalized address or CIDR", e)
		}
	}
	for _, v := range []string{p.Sources.SSHDLogPath, p.Sources.AuthLogPath, p.Sources.Action} {
		if strings.ContainsAny(v, "\r\n%") || strings.TrimSpace(v) != v {
			return fmt.Errorf("jail source %q cannot be written into the jail file", v)
		}
	}
	return nil
}

// RenderJail renders jail.d/tunnelsvc.local. It refuses values that fail
// their validators (the API normalized whitelist entries already; this
// catches anything that did not come through it).
func RenderJail(p JailParams) (string, error) {
	if err := p.check(); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("# Managed by tunnelsvc: the dashboard's ban-tool settings (Security page).\n")
	b.WriteString("# Rewritten on every change and checked with `fail2ban-client -t` first;\n")
	b.WriteString("# local edits are lost. Put jails of your own in another jail.d file.\n")
	ignore := append([]string{"127.0.0.1/8", "::1"}, p.Whitelist...)
	common := func() {
		fmt.Fprintf(&b, "maxretry = %d\n", p.Config.MaxRetry)
		fmt.Fprintf(&b, "findtime = %d\n", p.Config.FindTime)
		fmt.Fprintf(&b, "bantime  = %d\n", p.Config.BanTime)
		fmt.Fprintf(&b, "ignoreip = %s\n", strings.Join(ignore, " "))
		if p.Sources.Action != "" {
			fmt.Fprintf(&b, "action   = %s\n", p.Sources.Action)
		}
	}

	b.WriteString("\n[" + SSHDJail + "]\n")
	b.WriteString("enabled  = true\n")
	if p.Sources.SSHDLogPath != "" {
		b.WriteString("backend  = polling\n")
		fmt.Fprintf(&b, "logpath  = %s\n", p.Sources.SSHDLogPath)
	} else {
		// Debian 12 has no syslog file by default; sshd logs to the journal.
		b.WriteString("backend  = systemd\n")
	}
	common()

	b.WriteString("\n[" + AuthJail + "]\n")
	b.WriteString("enabled  = true\n")
	b.WriteString("filter   = " + AuthJail + "\n")
	if p.Sources.AuthLogPath != "" {
		b.WriteString("backend  = polling\n")
		fmt.Fprintf(&b, "logpath  = %s\n", p.Sources.AuthLogPath)
	} else {
		b.WriteString("backend  = systemd\n")
		b.WriteString("journalmatch = _SYSTEMD_UNIT=" + DaemonUnit + "\n")
	}
	// Someone guessing the dashboard password is shut out of every port,
	// not only the dashboard's.
	b.WriteString("banaction = %(banaction_allports)s\n")
	common()
	return b.String(), nil
}
