package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/apicheck"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// The document is loaded once per test binary.
var (
	apiDocOnce sync.Once
	apiDoc     *apicheck.Checker
	apiDocErr  error
)

func openAPIChecker(t testing.TB) *apicheck.Checker {
	t.Helper()
	apiDocOnce.Do(func() { apiDoc, apiDocErr = apicheck.New(openAPISpec) })
	if apiDocErr != nil {
		t.Fatal(apiDocErr)
	}
	return apiDoc
}

// checkedHandler wraps h so that every response it gives is validated
// against openapi.yaml; one the document does not describe fails t. Any
// harness that serves the API in a test wraps its handler with this.
func checkedHandler(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	return openAPIChecker(t).Handler(t, h)
}

// TestMain says, with -v, how many responses were held against the
// document, and stops the test PostgreSQL if a test started it.
func TestMain(m *testing.M) {
	auth.LowCostForTests()
	code := testutil.RunWithPostgres(m)
	if testing.Verbose() && apiDoc != nil {
		fmt.Printf("openapi.yaml: %d responses validated\n", apiDoc.Validated())
	}
	os.Exit(code)
}

// reporter records what a check reports instead of failing the test.
type reporter struct{ errs []string }

func (r *reporter) Helper() {}
func (r *reporter) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckedHandlerFailsUndescribedResponses: a response the document does
// not describe fails the test that got it; a described one does not.
func TestCheckedHandlerFailsUndescribedResponses(t *testing.T) {
	cases := []struct {
		name, method, path string
		status             int
		contentType, body  string
		fails              string // "" when the response is described
	}{
		{"described", "GET", "/api/auth/status", 200, "application/json", `{"data":{"setup":true,"authenticated":false,"totp_enabled":false}}`, ""},
		{"session check", "GET", "/api/machines", 401, "application/json", `{"error":"authentication required"}`, ""},
		{"unlisted status", "GET", "/api/auth/status", 418, "application/json", `{"error":"teapot"}`, "status is not supported"},
		{"wrong body", "GET", "/api/auth/status", 200, "application/json", `{"data":{"setup":"yes"}}`, "doesn't match schema"},
		{"wrong content type", "GET", "/api/auth/status", 200, "text/plain", `ok`, "Content-Type"},
		{"error without envelope", "GET", "/api/machines", 401, "application/json", `{"message":"no"}`, "doesn't match schema"},
		{"JSON body where none is described", "GET", "/api/gate/authorize?host=a.example.com", 302, "application/json", `{"data":{}}`, "gives it no content"},
		{"no operation", "GET", "/api/not-documented", 200, "application/json", `{"data":{}}`, "no operation"},
		{"router 404", "GET", "/api/not-documented", 404, "application/json", `{"error":"not found"}`, ""},
		{"router 404 without envelope", "GET", "/api/not-documented", 404, "text/plain", `404 page not found`, "not application/json"},
		{"dashboard file", "GET", "/assets/app.js", 200, "text/javascript", `x`, ""},
	}
	// Its own checker, so that these made-up answers are not counted.
	checker, err := apicheck.New(openAPISpec)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var rec reporter
			h := checker.Handler(&rec, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", c.contentType)
				w.WriteHeader(c.status)
				w.Write([]byte(c.body))
			}))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(c.method, c.path, nil))
			if w.Code != c.status || w.Body.String() != c.body {
				t.Fatalf("the checker changed the response: %d %q", w.Code, w.Body)
			}
			switch {
			case c.fails == "" && len(rec.errs) > 0:
				t.Fatalf("described response reported: %v", rec.errs)
			case c.fails != "" && len(rec.errs) != 1:
				t.Fatalf("reports = %v, want one", rec.errs)
			case c.fails != "" && !strings.Contains(rec.errs[0], c.fails):
				t.Fatalf("report %q does not say %q", rec.errs[0], c.fails)
			case c.fails != "" && !strings.Contains(rec.errs[0], fmt.Sprintf("%s %s -> %d", c.method, c.path, c.status)):
				t.Fatalf("report %q does not name the exchange", rec.errs[0])
			}
		})
	}
}
