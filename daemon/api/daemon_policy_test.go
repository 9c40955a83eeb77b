package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/api"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
)

// The access refusals, byte for byte: what a caller the route table does
// not admit gets before any handler runs.
const (
	refusedNone      = `{"error":"authentication required"}`
	refusedRecent    = `{"error":"recent authentication required"}`
	refusedReadToken = `{"error":"this API token is read-only (scope read): it may only send GET requests"}`
	refusedToken     = `{"error":"API tokens cannot be used here: API tokens, two-factor, passkeys, single sign-on, ` +
		`the password and what needs a recent sign-in are for the operator signed in to the dashboard"}`
)

// policyCaller is one kind of client the policy test sends to every route.
type policyCaller struct {
	name           string
	cookie, bearer string
}

// declaredRefusal is the refusal the route table declares for caller on
// a route of rule ("" when the caller is let through to the handler).
func declaredRefusal(rule, caller string) (int, string) {
	switch {
	case rule == "public":
		return 0, ""
	case caller == "none":
		return 401, refusedNone
	case caller == "read token" && rule == "read", caller == "write token" && (rule == "read" || rule == "write"):
		return 0, ""
	case caller == "read token" && rule == "write":
		return 403, refusedReadToken
	case strings.HasSuffix(caller, "token"):
		return 403, refusedToken
	case caller == "stale session" && rule == "recent":
		return 403, refusedRecent
	}
	return 0, ""
}

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// TestRoutePolicy walks every route of the route table, on the daemon
// built as Serve builds it, with each kind of caller: none, a read token,
// a write token, a session outside its 10-minute window and a recent
// session. Each gets the answer the table declares: the exact refusal, or
// the handler's own answer. Bodies carry an unknown field, so a handler
// that reads one refuses it and nothing changes; path parameters name
// nothing that exists.
func TestRoutePolicy(t *testing.T) {
	d := newWiredDaemonWith(t, nil)
	a, srv := d.a, d.srv
	do := func(method, path, body, cookie, bearer string) (int, string, *http.Response) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, srv.URL+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if cookie != "" {
			req.AddCookie(&http.Cookie{Name: "tunnel_session", Value: cookie})
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, strings.TrimSpace(string(b)), res
	}
	session := func(path, body string) string {
		t.Helper()
		code, b, res := do("POST", path, body, "", "")
		for _, c := range res.Cookies() {
			if c.Name == "tunnel_session" && c.Value != "" {
				return c.Value
			}
		}
		t.Fatalf("POST %s: %d %s, no session", path, code, b)
		return ""
	}
	const pw = `{"password":"a long enough passphrase"}`
	stale := session("/api/auth/setup", pw)
	fresh := session("/api/auth/login", pw)
	token := func(scope string) string {
		t.Helper()
		code, b, _ := do("POST", "/api/tokens", `{"name":"`+scope+`","scope":"`+scope+`"}`, fresh, "")
		var out struct {
			Data struct{ Token string } `json:"data"`
		}
		if json.Unmarshal([]byte(b), &out) != nil || code != 201 || out.Data.Token == "" {
			t.Fatalf("create a %s token: %d %s", scope, code, b)
		}
		return out.Data.Token
	}
	callers := []policyCaller{
		{name: "none"},
		{name: "read token", bearer: token("read")},
		{name: "write token", bearer: token("write")},
		{name: "stale session", cookie: stale},
		{name: "recent session", cookie: fresh},
	}
	// The setup's session logged in 11 minutes ago (the daemon's clock is
	// the machine's: the session is moved back instead).
	ago := time.Now().Add(-11 * time.Minute).Unix()
	if _, err := a.Store.DB().ExecContext(context.Background(), "UPDATE sessions SET created_at = ?, authenticated_at = ? WHERE token_hash = ?",
		ago, ago, auth.HashToken(stale)); err != nil {
		t.Fatal(err)
	}
	table := api.Table()
	if len(table) < 90 {
		t.Fatalf("the route table has %d routes", len(table))
	}
	for _, rt := range table {
		if rt.Rule() == "public" {
			// Nobody is refused, and some would leave the machine
			// (detect-ip) or end the sessions the walk uses (logout).
			continue
		}
		path := pathParam.ReplaceAllString(rt.Path, "999999")
		body := ""
		if rt.Method != http.MethodGet && rt.Method != http.MethodDelete {
			body = `{"policy_probe":true}`
		}
		for _, c := range callers {
			code, got, _ := do(rt.Method, path, body, c.cookie, c.bearer)
			status, want := declaredRefusal(rt.Rule(), c.name)
			if want != "" {
				if code != status || got != want {
					t.Errorf("%s %s (%s) by %s: %d %s, want %d %s", rt.Method, rt.Path, rt.Rule(), c.name, code, got, status, want)
				}
				continue
			}
			for _, refusal := range []string{refusedNone, refusedRecent, refusedReadToken, refusedToken} {
				if got == refusal {
					t.Errorf("%s %s (%s) by %s: refused with %s", rt.Method, rt.Path, rt.Rule(), c.name, got)
				}
			}
		}
	}
}
