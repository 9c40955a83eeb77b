package firewall

import (
	"context"
	"errors"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
)

// Detection is GET /api/local/firewall/detect: what is present and active.
// Every probe tolerates a missing tool; a tool that fails is reported with
// its words in Notes rather than failing the whole answer.
type Detection struct {
	Mode      string   `json:"mode"`
	Nftables  Nftables `json:"nftables"`
	UFW       Frontend `json:"ufw"`
	Firewalld Frontend `json:"firewalld"`
	Iptables  Iptables `json:"iptables"`
	Notes     []string `json:"notes"`
}

// Nftables lists the tables present ("inet filter", ...).
type Nftables struct {
	Installed bool     `json:"installed"`
	Tables    []string `json:"tables"`
	// SvcTable is true when our table inet tunnelsvc is loaded.
	SvcTable bool `json:"svc_table"`
}

// Frontend is a firewall manager such as ufw or firewalld.
type Frontend struct {
	Installed bool `json:"installed"`
	Active    bool `json:"active"`
}

// Iptables counts the rules iptables-save and ip6tables-save print.
type Iptables struct {
	Installed bool `json:"installed"`
	Rules     int  `json:"rules"`
	IPv6Rules int  `json:"ipv6_rules"`
}

// Detect probes the machine. It never fails: an unreadable mode is a note.
func (s *Service) Detect(ctx context.Context) Detection {
	d := Detection{Nftables: Nftables{Tables: []string{}}, Notes: []string{}}
	mode, err := s.Mode(ctx)
	if err != nil {
		d.Notes = append(d.Notes, "mode: "+err.Error())
	}
	d.Mode = mode
	note := func(what string, res cmdrun.Result) {
		d.Notes = append(d.Notes, what+": "+res.Words())
	}
	missing := func(res cmdrun.Result) bool { return errors.Is(res.Err, cmdrun.ErrNotInstalled) }

	if res := s.run.Run(ctx, "nft", "list", "tables"); !missing(res) {
		d.Nftables.Installed = true
		if res.Err != nil {
			note("nft list tables", res)
		}
		for _, line := range strings.Split(res.Stdout, "\n") {
			if t, ok := strings.CutPrefix(strings.TrimSpace(line), "table "); ok {
				d.Nftables.Tables = append(d.Nftables.Tables, t)
				d.Nftables.SvcTable = d.Nftables.SvcTable || t == Table
			}
		}
	}
	if res := s.run.Run(ctx, "ufw", "status"); !missing(res) {
		d.UFW.Installed = true
		d.UFW.Active = strings.Contains(res.Stdout, "Status: active")
		if res.Err != nil {
			note("ufw status", res)
		}
	}
	// firewall-cmd --state exits non-zero with "not running" when stopped.
	if res := s.run.Run(ctx, "firewall-cmd", "--state"); !missing(res) {
		d.Firewalld.Installed = true
		d.Firewalld.Active = res.Err == nil && strings.TrimSpace(res.Stdout) == "running"
	}
	if res := s.run.Run(ctx, "iptables-save"); !missing(res) {
		d.Iptables.Installed = true
		d.Iptables.Rules = countRules(res.Stdout)
		if res.Err != nil {
			note("iptables-save", res)
		}
	}
	if res := s.run.Run(ctx, "ip6tables-save"); !missing(res) {
		d.Iptables.IPv6Rules = countRules(res.Stdout)
		if res.Err != nil {
			note("ip6tables-save", res)
		}
	}
	return d
}

func countRules(out string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "-A ") {
			n++
		}
	}
	return n
}
