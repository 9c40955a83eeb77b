package api

import (
	"encoding/json"
	"net/http"
	"testing"
)

// FuzzAuthBodies sends arbitrary bodies to every route of the auth issue that
// reads one. Whatever arrives, the answer is a known status in the JSON
// envelope, never a 5xx.
func FuzzAuthBodies(f *testing.F) {
	for _, s := range []string{
		`{"password":"correct horse battery staple"}`, `{"password":""}`, `{}`, `[]`, `null`,
		`{"password":5}`, `{"password":"a","extra":1}`, `{"password":"\u0000\ud800"}`, `{`, ``,
	} {
		f.Add(s, uint8(0))
	}
	e := newEnv(f)
	paths := []string{"/api/auth/setup", "/api/auth/login", "/api/auth/logout"}
	allowed := map[int]bool{200: true, 400: true, 401: true, 403: true, 409: true, 413: true, 429: true}
	f.Fuzz(func(t *testing.T, body string, which uint8) {
		e.t = t
		r := e.do(req{method: "POST", path: paths[int(which)%len(paths)], body: body})
		if !allowed[r.Code] {
			t.Fatalf("status %d for body %q: %s", r.Code, body, r.Body)
		}
		var env map[string]json.RawMessage
		if err := json.Unmarshal(r.Body.Bytes(), &env); err != nil {
			t.Fatalf("answer is not JSON: %q", r.Body)
		}
		_, hasData := env["data"]
		_, hasErr := env["error"]
		if (r.Code == http.StatusOK) != hasData || (r.Code != http.StatusOK) != hasErr {
			t.Fatalf("status %d with envelope %s", r.Code, r.Body)
		}
	})
}
