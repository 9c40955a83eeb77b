package machines

import (
	"fmt"
	"reflect"
	"testing"
)

// The page, the filters and the counts of Select, on a fleet whose bundle
// states the API cannot easily make: outdated, updating, unsupported, and
// a machine on a newer bundle than the server's.
func TestSelect(t *testing.T) {
	m := func(id int64, name, status, update, bundle string) Machine {
		x := Machine{ID: id, Name: name, Status: status, BundleVersion: bundle}
		x.Update.State = update
		if update == "outdated" {
			x.Update.TargetVersion = "0.1.0+git20.b"
		}
		if update == "outdated" || update == "failed" {
			// As updateView decides from the status.
			x.Update.CanUpdate = status == "online"
			if !x.Update.CanUpdate {
				x.Update.Blocked = "it is " + status
			}
		}
		return x
	}
	ms := []Machine{
		m(1, "a", "online", "current", "0.1.0+git20.b"),
		m(2, "b", "offline", "outdated", "0.1.0+git10.a"),
		m(3, "c", "online", "updating", "0.1.0+git10.a"),
		m(4, "d", "online", "unsupported", ""),
		m(5, "e", "pending", "outdated", "0.1.0+git30.c"), // newer than the server's
		m(6, "f", "online", "failed", "0.1.0+git10.a"),
	}
	names := func(p Page) string {
		s := ""
		for _, x := range p.Items {
			s += x.Name
		}
		return s + fmt.Sprintf(" %d %q", p.Matched, p.Next)
	}
	p := Select(ms, ListQuery{Limit: 2}, "0.1.0+git20.b")
	// Update all takes f alone: b is offline, d's agent cannot update
	// itself, and e runs a newer bundle (and is pending).
	want := Counts{All: 6, Online: 4, Offline: 1, Pending: 1, Outdated: 4, Updating: 1, ForUpdateAll: 1,
		UpdateAllSkips: []Skip{{"it is offline", 1}, {"its agent is too old to update itself", 1}, {"it runs a newer bundle", 1}}}
	if !reflect.DeepEqual(p.Counts, want) {
		t.Errorf("counts %+v, want %+v", p.Counts, want)
	}
	if got := names(p); got != `ab 6 "2"` {
		t.Errorf("first page: %s", got)
	}
	for _, c := range []struct {
		q    ListQuery
		want string
	}{
		{ListQuery{After: 2, Limit: 2}, `cd 6 "4"`},
		{ListQuery{After: 4, Limit: 2}, `ef 6 ""`},
		{ListQuery{State: "outdated", Limit: 2}, `bd 4 "4"`},
		{ListQuery{State: "outdated", After: 4, Limit: 2}, `ef 4 ""`},
		{ListQuery{State: "online", Search: "F"}, `f 1 ""`},
		{ListQuery{Search: "failed online"}, `f 1 ""`},
		{ListQuery{Search: "bundle 0.1.0+git10.a"}, `bcf 3 ""`},
		{ListQuery{Search: "nothing"}, ` 0 ""`},
	} {
		if got := names(Select(ms, c.q, "0.1.0+git20.b")); got != c.want {
			t.Errorf("%+v: %s, want %s", c.q, got, c.want)
		}
	}
	if p := Select(ms, ListQuery{}, ""); p.Counts.ForUpdateAll != 0 {
		t.Errorf("with no bundle on the server, %d machines for Update all", p.Counts.ForUpdateAll)
	}
}
