package api

import (
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
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

// TestOpenAPIRefusesUnknownFields: every JSON request body the document
// describes as an object says additionalProperties: false, as the server
// refuses unknown fields (400 `unknown field "x"`); POST /api/local/skip,
// whose body is ignored when it does not parse, is the one exception.
func TestOpenAPIRefusesUnknownFields(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.RequestBody == nil || op.RequestBody.Value == nil || path == "/api/local/skip" {
				continue
			}
			mt := op.RequestBody.Value.Content.Get("application/json")
			if mt == nil || mt.Schema == nil || mt.Schema.Value == nil {
				continue
			}
			s := mt.Schema.Value
			if s.Type.Is("object") && (s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has) {
				t.Errorf("%s %s: its request body does not say additionalProperties: false", method, path)
			}
		}
	}
}

// TestOpenAPISecurityIsTheRouteTable: the document names the apiToken
// scheme on exactly the routes the route table lets API tokens call.
func TestOpenAPISecurityIsTheRouteTable(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range Table() {
		item := doc.Paths.Find(rt.Path)
		if item == nil {
			continue // TestOpenAPICoversRouteTable reports it
		}
		op := item.GetOperation(rt.Method)
		if op == nil {
			continue
		}
		tokens := false
		if op.Security != nil {
			for _, req := range *op.Security {
				if _, ok := req["apiToken"]; ok {
					tokens = true
				}
			}
		}
		if want := rt.Access == read || rt.Access == write; tokens != want {
			t.Errorf("%s %s (%s): the document says API tokens %v", rt.Method, rt.Path, rt.Access, map[bool]string{true: "may call it", false: "may not"}[tokens])
		}
	}
}
