package machines

import (
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Status is a machine's state in one word, and why when it is not
// working: the one answer the API, the machine list and its counts, the
// machine page and the notifications give.
//
//   - online: its tunnel client is connected to a tunnel server now;
//   - offline: it was connected once and is not now;
//   - pending: it joined and never connected.
//
// TunnelServer is "" while this edge's tunnel server answers, else what is
// wrong with it: a machine cannot be online through a tunnel server that
// is not running, whatever was last recorded.
type Status struct {
	State  string `json:"state"`
	Reason string `json:"reason"`
}

// StatusOf decides machine m's Status.
func StatusOf(m store.Machine, tunnelServer string) Status {
	st := Status{State: m.Status}
	if st.State == "" {
		st.State = "pending"
	}
	// A tunnel server that is not running comes first: no machine is
	// connected through it, whatever was last recorded.
	if st.State != "pending" && tunnelServer != "" {
		return Status{State: "offline", Reason: "the tunnel server is not running: " + tunnelServer}
	}
	// A failed config delivery comes first: it is the one the operator
	// can act on. An outdated agent comes next: the machine works, but
	// should be bootstrapped again.
	if m.ConfigPush != nil && !m.ConfigPush.OK {
		st.Reason = "config not delivered: " + m.ConfigPush.Message
		return st
	}
	switch {
	case st.State == "online" && m.AgentOutdated:
		st.Reason = OutdatedAgentHint
	case st.State == "online":
	case m.LastSeen.IsZero():
		st.Reason = "never connected"
	case st.State == "offline":
		st.Reason = "disconnected"
	default:
		st.Reason = "waiting for the tunnel client to connect"
	}
	return st
}
