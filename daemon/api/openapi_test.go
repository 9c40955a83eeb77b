package api

import (
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/gorilla/mux"
)

// TestOpenAPICoversRouteTable keeps daemon/api/openapi.yaml true: every
// route in the table is documented with its method, and nothing documented
// is missing from the table.
func TestOpenAPICoversRouteTable(t *testing.T) {
	documented := map[string]bool{}
	var path string
	pathRe := regexp.MustCompile(`^  (/\S*):\s*$`)
	methodRe := regexp.MustCompile(`^    (get|post|put|patch|delete):`)
	for _, line := range strings.Split(string(openAPISpec), "\n") {
		if m := pathRe.FindStringSubmatch(line); m != nil {
			path = m[1]
		} else if m := methodRe.FindStringSubmatch(line); m != nil && path != "" {
			documented[strings.ToUpper(m[1])+" "+normalize(path)] = true
		}
	}
	e := newEnv(t)
	router := e.srv.router
	routed := map[string]bool{}
	err := router.Walk(func(r *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := r.GetPathTemplate()
		if err != nil || !strings.HasPrefix(tpl, "/") || tpl == "/" {
			return nil
		}
		methods, _ := r.GetMethods()
		for _, m := range methods {
			if m == http.MethodHead {
				continue
			}
			routed[m+" "+normalize(tpl)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var missing, extra []string
	for r := range routed {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	for d := range documented {
		if !routed[d] {
			extra = append(extra, d)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("openapi.yaml is out of date:\n routed but not documented: %v\n documented but not routed: %v", missing, extra)
	}
}

// normalize renames path variables so {id} and {machine_id} compare equal.
func normalize(p string) string {
	return regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(p, "{}")
}
