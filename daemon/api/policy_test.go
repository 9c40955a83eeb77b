package api

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/gorilla/mux"
)

// TestRouteTableRules: the rules the route table must keep, whoever adds a
// route: it lists every route the router serves; read routes only read;
// no token creates tokens, manages identity or edges, or generates,
// uploads or downloads a private key.
func TestRouteTableRules(t *testing.T) {
	e := newEnv(t)
	declared := map[string]access{}
	for _, rt := range e.srv.table {
		declared[rt.Method+" "+rt.Path] = rt.Access
		if rt.Access == read && rt.Method != http.MethodGet {
			t.Errorf("%s %s is read but not GET", rt.Method, rt.Path)
		}
		tokens := rt.Access == read || rt.Access == write
		identity := strings.HasPrefix(rt.Path, "/api/auth/") || strings.HasPrefix(rt.Path, "/api/tokens")
		keys := strings.HasPrefix(rt.Path, "/api/local/ssh-keys/") && (strings.HasSuffix(rt.Path, "/generate") ||
			strings.HasSuffix(rt.Path, "/upload") || strings.HasSuffix(rt.Path, "/download"))
		edges := strings.HasPrefix(rt.Path, "/api/edges") && rt.Method != http.MethodGet
		if tokens && (identity || keys || edges) {
			t.Errorf("%s %s takes API tokens (%s)", rt.Method, rt.Path, rt.Access)
		}
	}
	if declared["POST /api/tokens"] != recent {
		t.Errorf("creating an API token is %s, want sudo mode", declared["POST /api/tokens"])
	}
	err := e.srv.router.Walk(func(r *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		path, err := r.GetPathTemplate()
		if err != nil || !strings.HasPrefix(path, "/api/") && !strings.HasPrefix(path, "/static/") {
			return nil
		}
		methods, _ := r.GetMethods()
		for _, m := range methods {
			if _, ok := declared[m+" "+path]; !ok {
				t.Errorf("%s %s is served but not in the route table", m, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAccessTableInDocs: docs/api.md shows the route table's access rules
// as the code declares them (make docs writes it).
func TestAccessTableInDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	got, ok := AccessSection(string(doc))
	if !ok {
		t.Fatalf("docs/api.md has no %s ... %s section", accessBegin, accessEnd)
	}
	if want := AccessTable(); got != want {
		t.Fatalf("docs/api.md's access table is out of date: run make docs\n--- docs\n%s\n--- code\n%s", got, want)
	}
}
