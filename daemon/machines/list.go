package machines

import (
	"strconv"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/version"
)

// Page sizes of the machine list (GET /api/machines?limit=…).
const (
	DefaultPageSize = 100
	MaxPageSize     = 500
)

// ListStates are the states the machine list filters by (?state=…):
// a machine's status, or "outdated" (it does not run the server's bundle,
// and no update of it is under way).
var ListStates = []string{"online", "offline", "pending", "outdated"}

// ListQuery asks for one page of the machine list, in id order (oldest
// first): the machines whose text holds every word of Search and whose
// state is State ("" for every state), after the machine with id After.
type ListQuery struct {
	Search string
	State  string
	After  int64
	Limit  int
}

// Page is one page of the machine list.
type Page struct {
	Items []Machine
	// Matched is how many machines match the search and the state, on
	// every page; Next is the cursor of the next page ("" on the last).
	Matched int
	Next    string
	Counts  Counts
}

// Counts are the whole fleet's, whatever the query: what the Overview
// shows and Update all would do.
type Counts struct {
	All      int `json:"all"`
	Online   int `json:"online"`
	Offline  int `json:"offline"`
	Pending  int `json:"pending"`
	Outdated int `json:"outdated"`
	Updating int `json:"updating"`
	// ForUpdateAll is how many machines POST /api/machines/update
	// {"all": true} would update now; UpdateAllSkips, which of those that
	// lack the server's bundle it would leave, and why.
	ForUpdateAll   int    `json:"for_update_all"`
	UpdateAllSkips []Skip `json:"update_all_skips"`
}

// Skip is a reason Update all leaves machines out, and how many.
type Skip struct {
	Reason   string `json:"reason"`
	Machines int    `json:"machines"`
}

// Cursor is the cursor of the page after the one that ended with id.
func Cursor(id int64) string { return strconv.FormatInt(id, 10) }

// ParseCursor reads a cursor Cursor gave; ok is false for anything else.
func ParseCursor(c string) (after int64, ok bool) {
	n, err := strconv.ParseInt(c, 10, 64)
	return n, err == nil && n > 0
}

// Outdated says whether machine m does not run the server's bundle, which
// the daemon knows, and no update of it is under way: the list's
// "outdated" state.
func Outdated(m Machine) bool {
	u := m.Update
	known := u.State != "" && !(u.State == "outdated" && u.TargetVersion == "")
	return known && u.State != "current" && u.State != "updating" && u.State != updateUnknown
}

// ForUpdateAll says whether {"all": true} updates machine m to the
// server's bundle server: it lacks the bundle, can take an update now, and
// does not run a newer one (no downgrade by "all").
func ForUpdateAll(m Machine, server string) bool {
	return updateAllSkip(m, server) == "" && needsUpdate(m)
}

// needsUpdate: m does not run the server's bundle, or is not known to.
func needsUpdate(m Machine) bool {
	switch m.Update.State {
	case "current", "updating", "":
		return false
	}
	return true
}

// updateAllSkip is why Update all leaves m out although it needs an update
// ("" when it does not).
func updateAllSkip(m Machine, server string) string {
	switch {
	case !needsUpdate(m):
		return ""
	case m.Update.State == "unsupported":
		return "its agent is too old to update itself"
	case version.Newer(m.BundleVersion, server):
		return "it runs a newer bundle"
	case !m.Update.CanUpdate:
		return m.Update.Blocked
	}
	return ""
}

// Select gives the page q asks for of ms (in id order), and the counts of
// all of ms; server is the server's bundle version ("" when it has none).
func Select(ms []Machine, q ListQuery, server string) Page {
	words := strings.Fields(strings.ToLower(q.Search))
	p := Page{Counts: Counts{UpdateAllSkips: []Skip{}}}
	for i := range ms {
		p.Counts.add(&ms[i], server)
	}
	p.Items, p.Matched, p.Next = paginate(ms, func(m *Machine) int64 { return m.ID },
		func(m *Machine) bool { return matches(m, q.State, words) }, q.After, q.Limit)
	return p
}

func (c *Counts) add(m *Machine, server string) {
	c.All++
	switch m.Status {
	case "online":
		c.Online++
	case "offline":
		c.Offline++
	case "pending":
		c.Pending++
	}
	if Outdated(*m) {
		c.Outdated++
	}
	if m.Update.State == "updating" {
		c.Updating++
	}
	if server == "" {
		return
	}
	if why := updateAllSkip(*m, server); why != "" {
		for i := range c.UpdateAllSkips {
			if c.UpdateAllSkips[i].Reason == why {
				c.UpdateAllSkips[i].Machines++
				return
			}
		}
		c.UpdateAllSkips = append(c.UpdateAllSkips, Skip{Reason: why, Machines: 1})
	} else if needsUpdate(*m) {
		c.ForUpdateAll++
	}
}

func matches(m *Machine, state string, words []string) bool {
	switch state {
	case "":
	case "outdated":
		if !Outdated(*m) {
			return false
		}
	default:
		if m.Status != state {
			return false
		}
	}
	return hasWords(searchText(m), words)
}

// searchText is what the list's search looks in: what the Machines page
// shows of a machine.
func searchText(m *Machine) string {
	parts := []string{m.Name, m.Username, m.Status, m.StatusReason, m.ClientAddr, m.Update.State}
	if m.TunnelPort > 0 {
		parts = append(parts, strconv.Itoa(m.TunnelPort))
	}
	for _, v := range [][2]string{{"bundle", m.BundleVersion}, {"agent", m.AgentVersion}, {"tunnel client", m.ClientVersion}} {
		if v[1] != "" {
			parts = append(parts, v[0]+" "+v[1])
		}
	}
	return strings.Join(parts, " ")
}
