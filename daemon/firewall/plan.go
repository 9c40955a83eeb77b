package firewall

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Preview is what choosing svc would do now: the plan and what the
// operator could lose.
type Preview struct {
	Plan
	// Warnings say who could be locked out; the dashboard asks the
	// operator to confirm them.
	Warnings []string `json:"warnings"`
}

// Preview renders the plan from the current tunnels and settings.
func (s *Service) Preview(ctx context.Context) (Preview, error) {
	p, err := s.ports(ctx)
	if err != nil {
		return Preview{}, err
	}
	pl, err := MakePlan(p)
	if err != nil {
		return Preview{}, err
	}
	return Preview{Plan: pl, Warnings: warnings(pl)}, nil
}

func warnings(pl Plan) []string {
	w := []string{
		"Every other incoming connection is dropped: only TCP " + list(pl.OpenTCP) + " stay open to the outside. Any other service on this server (another SSH port, a VPN, a database, a mail server) becomes unreachable.",
	}
	if slices.Contains(pl.OpenTCP, 22) {
		w = append(w, "SSH is allowed on port 22 only: if sshd listens on another port you will lose SSH access to this server.")
	}
	if pl.DashboardPrivate {
		w = append(w, fmt.Sprintf("The dashboard port %d is closed to the outside: reach the dashboard through its https://router.<domain> address or from this server itself, or you lock yourself out of it.", pl.DashboardPort))
	}
	if len(pl.PublicTunnelTCP) > 0 && pl.BindIP != "" {
		w = append(w, "Public tcp tunnels ("+list(pl.PublicTunnelTCP)+") are accepted only on "+pl.BindIP+".")
	}
	if len(pl.PublicTunnelUDP) > 0 && pl.BindIP != "" {
		w = append(w, "Public udp tunnels ("+list(pl.PublicTunnelUDP)+") are accepted only on "+pl.BindIP+".")
	}
	w = append(w, "Undo from a console on the server: nft delete table inet tunnelsvc")
	return w
}

func list(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}
