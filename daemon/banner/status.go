package banner

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
)

// Jail is one jail's live state.
type Jail struct {
	Name            string   `json:"name"`
	CurrentlyFailed int      `json:"currently_failed"`
	TotalFailed     int      `json:"total_failed"`
	CurrentlyBanned int      `json:"currently_banned"`
	TotalBanned     int      `json:"total_banned"`
	Banned          []string `json:"banned"`
}

// Status is the ban tool's state as GET /api/security/banner shows it.
type Status struct {
	Installed bool `json:"installed"`
	// Problem says why fail2ban cannot be used and what to do (only when
	// not installed); Version is fail2ban's (only when installed).
	Problem string `json:"problem,omitempty"`
	Version string `json:"version,omitempty"`
	// Missing lists what an installed fail2ban lacks here
	// (python3-systemd); empty otherwise.
	Missing []MissingPart `json:"missing"`
	Running bool          `json:"running"`
	// Managed is true once setup-banner has written our jail file.
	Managed   bool     `json:"managed"`
	JailFile  string   `json:"jail_file"`
	Jails     []Jail   `json:"jails"`
	Config    Config   `json:"config"`
	Whitelist []string `json:"whitelist"`
}

// Status reads the live state from fail2ban. A missing or stopped fail2ban
// is a state, not an error.
func (s *Service) Status(ctx context.Context) (Status, error) {
	st := Status{Jails: []Jail{}, Missing: []MissingPart{}, Managed: s.managed(), JailFile: s.JailPath()}
	var err error
	if st.Config, err = s.Config(ctx); err != nil {
		return st, err
	}
	if st.Whitelist, err = s.Whitelist(ctx); err != nil {
		return st, err
	}
	in, err := s.Installed(ctx)
	if err != nil {
		return st, err
	}
	st.Installed, st.Version, st.Problem = in.Installed, in.Version, in.Problem
	if !st.Installed {
		return st, nil
	}
	st.Missing = s.Missing(ctx)
	if path := s.socketPath(); path != "" && !strings.Contains(path, "%(") {
		// Nothing to connect to, or no answer to ping: not running.
		conn, err := dialF2B(ctx, path)
		if err != nil {
			return st, nil
		}
		defer conn.Close()
		if _, err := conn.command("ping"); err != nil {
			return st, nil
		}
		st.Running = true
		if st.Jails, err = socketStatus(conn); err != nil {
			st.Jails = []Jail{}
			return st, err
		}
		return st, nil
	}
	if res := s.client(ctx, "ping"); res.Err != nil {
		return st, nil
	}
	st.Running = true
	res := s.client(ctx, "status")
	if res.Err != nil {
		return st, fmt.Errorf("fail2ban-client status: %s", cmdrun.Message("fail2ban-client", res))
	}
	for _, name := range parseJailList(res.Stdout) {
		res := s.client(ctx, "status", name)
		if res.Err != nil {
			return st, fmt.Errorf("fail2ban-client status %s: %s", name, cmdrun.Message("fail2ban-client", res))
		}
		st.Jails = append(st.Jails, parseJailStatus(name, res.Stdout))
	}
	return st, nil
}

var (
	jailListRe = regexp.MustCompile(`(?m)Jail list:\s*(.*)$`)
	fieldRe    = regexp.MustCompile(`(?m)^[\s|` + "`" + `-]*(Currently failed|Total failed|Currently banned|Total banned|Banned IP list):[ \t]*(.*)$`)
)

func parseJailList(out string) []string {
	m := jailListRe.FindStringSubmatch(out)
	if m == nil {
		return nil
	}
	var names []string
	for _, n := range strings.Split(m[1], ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return names
}

func parseJailStatus(name, out string) Jail {
	j := Jail{Name: name, Banned: []string{}}
	for _, m := range fieldRe.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(strings.TrimSpace(m[2]))
		switch m[1] {
		case "Currently failed":
			j.CurrentlyFailed = n
		case "Total failed":
			j.TotalFailed = n
		case "Currently banned":
			j.CurrentlyBanned = n
		case "Total banned":
			j.TotalBanned = n
		case "Banned IP list":
			j.Banned = append(j.Banned, strings.Fields(m[2])...)
		}
	}
	return j
}

// jailName is what fail2ban accepts as a jail name here; it also keeps a
// name from being read as an option.
var jailName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

// Unban lifts a ban. The returned error is a *ValidationError for bad input
// and an *ApplyError carrying fail2ban's words when fail2ban refuses.
func (s *Service) Unban(ctx context.Context, jail, ip string) (string, error) {
	if jail == "" || ip == "" {
		return "", invalid("jail and ip are required")
	}
	if !jailName.MatchString(jail) {
		return "", invalid("invalid jail name %q", jail)
	}
	a, err := validate.IP(ip)
	if validate.IsZone(err) {
		return "", invalid("invalid ip %q: zones are not allowed", ip)
	}
	if err != nil {
		return "", invalid("invalid ip %q", ip)
	}
	addr := a.Unmap().String()
	res := s.client(ctx, "set", jail, "unbanip", addr)
	if errors.Is(res.Err, cmdrun.ErrNotInstalled) {
		return "", &ApplyError{Msg: "fail2ban is not installed"}
	}
	if res.Err != nil {
		return "", &ApplyError{Msg: cmdrun.Message("fail2ban-client", res)}
	}
	// fail2ban answers with the number of addresses it unbanned.
	if strings.TrimSpace(res.Stdout) == "0" {
		return "", &ApplyError{Msg: fmt.Sprintf("%s is not banned in %s", addr, jail)}
	}
	return addr, nil
}
