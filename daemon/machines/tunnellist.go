package machines

import (
	"strconv"
	"strings"
)

// TunnelStates are the states the tunnel list filters by (?state=…): a
// tunnel's status, or an HTTP tunnel's last check through the web proxy
// (up, down, unknown: not checked yet).
var TunnelStates = []string{"active", "pending", "error", "offline", "paused", "up", "down", "unknown"}

// TunnelKinds are the kinds the tunnel list filters by (?kind=…).
var TunnelKinds = []string{"http", "tcp", "udp"}

// TunnelQuery asks for one page of the tunnel list, in id order (oldest
// first): the tunnels of machine MachineID (0: every machine) of kind Kind
// in state State ("" for any) whose text holds every word of Search,
// after the tunnel with id After.
type TunnelQuery struct {
	MachineID int64
	Kind      string
	State     string
	Search    string
	After     int64
	Limit     int
}

// TunnelPage is one page of the tunnel list.
type TunnelPage struct {
	Items []Tunnel
	// Matched is how many tunnels match the query, on every page; Next is
	// the cursor of the next page ("" on the last).
	Matched int
	Next    string
	Counts  TunnelCounts
}

// TunnelCounts are every tunnel's, whatever the query.
type TunnelCounts struct {
	All     int `json:"all"`
	Active  int `json:"active"`
	Pending int `json:"pending"`
	Error   int `json:"error"`
	Offline int `json:"offline"`
	Paused  int `json:"paused"`
}

// SelectTunnels gives the page q asks for of ts (every tunnel, in id
// order), and the counts of all of ts.
func SelectTunnels(ts []Tunnel, q TunnelQuery) TunnelPage {
	words := strings.Fields(strings.ToLower(q.Search))
	var p TunnelPage
	for i := range ts {
		p.Counts.add(&ts[i])
	}
	p.Items, p.Matched, p.Next = paginate(ts, func(t *Tunnel) int64 { return t.ID }, func(t *Tunnel) bool {
		return (q.MachineID == 0 || t.MachineID == q.MachineID) && (q.Kind == "" || t.Kind == q.Kind) && tunnelInState(t, q.State) && hasWords(tunnelText(t), words)
	}, q.After, q.Limit)
	return p
}

func (c *TunnelCounts) add(t *Tunnel) {
	c.All++
	switch t.Status {
	case "active", "":
		c.Active++
	case "pending":
		c.Pending++
	case "error":
		c.Error++
	case "offline":
		c.Offline++
	case "paused":
		c.Paused++
	}
}

// tunnelInState says whether t is in state ("" is every state): its
// status, or for an HTTP tunnel its last check.
func tunnelInState(t *Tunnel, state string) bool {
	if state == "" {
		return true
	}
	status := t.Status
	if status == "" {
		status = "active"
	}
	if status == state {
		return true
	}
	if t.Kind != "http" {
		return false
	}
	check := "unknown"
	if t.Reachability != nil && t.Reachability.State != "" {
		check = t.Reachability.State
	}
	return check == state
}

// tunnelText is what the list's search looks in: what the Tunnels page
// shows of a tunnel.
func tunnelText(t *Tunnel) string {
	parts := []string{t.Name, t.MachineName, t.Kind, strconv.Itoa(t.LocalPort), t.Access, t.Status, t.StatusReason}
	for _, s := range []*string{t.Subdomain, t.URL, t.Address} {
		if s != nil {
			parts = append(parts, *s)
		}
	}
	if t.RemotePort > 0 {
		parts = append(parts, strconv.Itoa(t.RemotePort))
	}
	parts = append(parts, t.AllowIPs...)
	for _, d := range t.Domains {
		parts = append(parts, d.Name)
	}
	if t.Reachability != nil {
		parts = append(parts, t.Reachability.Error)
	}
	return strings.Join(parts, " ")
}

// hasWords says whether text holds every one of words (lower case).
func hasWords(text string, words []string) bool {
	if len(words) == 0 {
		return true
	}
	text = strings.ToLower(text)
	for _, w := range words {
		if !strings.Contains(text, w) {
			return false
		}
	}
	return true
}

// paginate keeps, in order, the items that match and come after the one
// with id after: a page of at most limit (0: all of them), how many match
// in all, and the cursor of the next page ("" on the last).
func paginate[T any](items []T, id func(*T) int64, match func(*T) bool, after int64, limit int) (page []T, matched int, next string) {
	page = []T{}
	for i := range items {
		it := &items[i]
		if !match(it) {
			continue
		}
		matched++
		if id(it) <= after {
			continue
		}
		if limit > 0 && len(page) == limit {
			next = Cursor(id(&page[len(page)-1]))
			continue
		}
		page = append(page, *it)
	}
	return page, matched, next
}
