package app

import (
	"context"
	"errors"
	"net"

	"github.com/tunnelsvc/tunnelsvc/daemon/firewall"
	"github.com/tunnelsvc/tunnelsvc/daemon/fleet"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
)

// OutdatedMachine is a machine whose agent cannot take a fleet update, and
// the line that re-runs its join (machines.RejoinCommand).
type OutdatedMachine struct {
	ID     int64  `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
	// Reason says why it is listed.
	Reason string `json:"reason"`
	// Command is what to run: RejoinCommand over the machine's SSH command
	// through this server when there is one, else RejoinCommand itself.
	Command string `json:"command"`
	// RejoinCommand is the line to run on the machine itself.
	RejoinCommand string `json:"rejoin_command"`
	SSHCommand    string `json:"ssh_command"`
}

// ErrNoJoinBase: nothing configured says where machines reach this server,
// so no rejoin line can be built.
var ErrNoJoinBase = errors.New("no address machines reach this server at is known, so there is no rejoin line: pass --base-url (TUNNELSVC_BASE_URL) or --server-host, as the daemon runs with")

// OutdatedMachines lists the machines whose agent predates fleet updates,
// with the line that rejoins each. It works offline (from Services): the
// join base URL is the resolver's, without a request (the dashboard port
// is --listen's).
//
// What is known of an agent here is whether it predates signed requests
// (agent_outdated, recorded when the daemon last reached it); those are
// the agents listed.
func (a *App) OutdatedMachines(ctx context.Context) ([]OutdatedMachine, error) {
	port := ""
	if _, p, err := net.SplitHostPort(a.Config.Listen); err == nil {
		port = p
	}
	ans, err := a.Reach.Resolve(ctx, &reach.Request{Port: port})
	if err != nil {
		return nil, err
	}
	if ans.JoinBase == "" {
		return nil, ErrNoJoinBase
	}
	line := machines.RejoinCommand(ans.JoinBase)
	set := a.settings()
	svc := &machines.Service{Store: a.Store, Reach: a.Reach, Exposure: func(ctx context.Context) (machines.Exposure, error) {
		var x machines.Exposure
		var err error
		if x.Domain, err = set.Domain(ctx); err != nil {
			return x, err
		}
		if x.BindIP, err = set.BindIP(ctx); err != nil {
			return x, err
		}
		mode, err := set.FirewallMode(ctx)
		x.FirewallSvc = mode == firewall.ModeSvc
		return x, err
	}}
	ms, err := svc.Machines(ctx, "")
	if err != nil {
		return nil, err
	}
	out := []OutdatedMachine{}
	for _, m := range ms {
		// Agents from before signed requests (agent_outdated) and those
		// that reported no update capability: neither can take a fleet
		// update.
		if m.Update.State != fleet.StateUnsupported {
			continue
		}
		reason := "its agent predates fleet updates"
		if m.AgentOutdated {
			reason = "its agent predates signed requests and fleet updates"
		}
		o := OutdatedMachine{ID: m.ID, Name: m.Name, Status: m.Status, RejoinCommand: line, Command: line, Reason: reason}
		if ans.TunnelHost != "" {
			o.SSHCommand = m.SSHCommand
			if c := machines.RejoinOverSSH(m.SSHCommand, line); c != "" {
				o.Command = c
			}
		}
		out = append(out, o)
	}
	return out, nil
}
