package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
)

// Placeholders in FuzzAuthorizationHeader's inputs: the one real API token
// and the operator's real session, replaced before the request is sent,
// so the seeds say what they send and a crasher replays in a later run
// (the secrets are new each run).
const (
	apiTokenPlaceholder = "@TOKEN@"
	sessionPlaceholder  = "@SESSION@"
)

// authzRoutes are the routes FuzzAuthorizationHeader tries each input on:
// one a token may read, one a write token may call (an empty body, which
// only a caller let in gets to have refused as invalid), and one no token
// may ever use.
var authzRoutes = []struct {
	method, path, body string
	// asToken and asSession are the statuses of the real write token and
	// of the real session.
	asToken, asSession int
}{
	{"GET", "/api/machines", "", 200, 200},
	{"POST", "/api/tunnels", `{}`, 400, 400},
	{"GET", "/api/tokens", "", 403, 200},
}

// FuzzAuthorizationHeader sends arbitrary Authorization headers, with an
// arbitrary Cookie header, to a set-up server holding one write API token
// (@TOKEN@ and @SESSION@ in an input stand for it and for the operator's
// session). Whatever arrives: no 5xx; no route lets the request in (a 2xx,
// or the 400 of a handler that ran) unless the Authorization header
// carries the real token (not on GET /api/tokens, which no token may use)
// or the Cookie header the real session; everything else is a 401 or a
// 403 with an error message (the login rate limit, which refused tokens
// count against, is reset after each input: every answer here would be a
// 429 otherwise); exactly "Bearer <token>" and the session cookie alone
// are let in.
func FuzzAuthorizationHeader(f *testing.F) {
	for _, s := range [][2]string{
		{"Bearer @TOKEN@", ""},
		{"bearer @TOKEN@", ""},
		{"BEARER @TOKEN@", ""},
		{"Bearer  @TOKEN@ ", ""},
		{"Bearer\t@TOKEN@", ""},
		{"Bearer @TOKEN@x", ""},
		{"Bearer @TOKEN@\x00", ""},
		{"Bearer @TOKEN@\r\nX-Other: 1", ""},
		{"Bearer tsvc_@TOKEN@", ""},
		{"Bearer @TOKEN@, Bearer x", ""},
		{"Bearer", ""},
		{"Bearer ", ""},
		{"Bearer  ", ""},
		{"Bearer tsvc_", ""},
		{"Bearer tsvc_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", ""},
		{"Basic abc", ""},
		{"Basic dXNlcjpwYXNz", ""},
		{"Bearer " + strings.Repeat("A", 8192), ""},
		{"Bearer \x00\r\n", ""},
		{"", ""},
		{"", "tunnel_session=@SESSION@"},
		{"", "tunnel_session=x; tunnel_session=@SESSION@"},
		{"", "tunnel_session=@SESSION@x"},
		{"", "tunnel_session=" + strings.Repeat("x;tunnel_session=", 20)},
		{"Bearer x", "tunnel_session=@SESSION@"},
		{"Bearer @TOKEN@", "tunnel_session=forged"},
		{"", "TUNNEL_SESSION=@SESSION@"},
	} {
		f.Add(s[0], s[1])
	}
	e := newMachinesEnv(f, wide)
	r := e.do(req{method: "POST", path: "/api/tokens", body: `{"name":"fuzz","scope":"write"}`, cookie: e.cookie})
	var created struct {
		Data struct {
			Token string `json:"token"`
		} `json:"data"`
	}
	if r.Code != 201 || json.Unmarshal(r.Body.Bytes(), &created) != nil || created.Data.Token == "" {
		f.Fatalf("POST /api/tokens: %d %s", r.Code, r.Body)
	}
	token, session := created.Data.Token, e.cookie
	f.Fuzz(func(t *testing.T, authorization, cookie string) {
		e.t = t
		// A fresh limiter: see above. Failures are counted globally too,
		// and this clock does not move, so distinct addresses would not
		// be enough.
		e.authSvc.Limiter = auth.NewLimiter(func() time.Time { return e.now })
		authorization = strings.ReplaceAll(authorization, apiTokenPlaceholder, token)
		cookie = strings.ReplaceAll(cookie, sessionPlaceholder, session)
		h := map[string]string{}
		if authorization != "" {
			h["Authorization"] = authorization
		}
		if cookie != "" {
			h["Cookie"] = cookie
		}
		withToken, withSession := strings.Contains(authorization, token), strings.Contains(cookie, session)
		for _, rt := range authzRoutes {
			r := e.do(req{method: rt.method, path: rt.path, body: rt.body, peer: "198.51.100.20:5000", header: h})
			in := r.Code != 401 && r.Code != 403
			switch {
			case r.Code >= 500:
				t.Fatalf("%s %s with Authorization %q, Cookie %q: status %d %s", rt.method, rt.path, authorization, cookie, r.Code, r.Body)
			case in && !withSession && !(withToken && rt.asToken != 403):
				t.Fatalf("%s %s with Authorization %q, Cookie %q: status %d, want 401 or 403 without the real token or session: %s",
					rt.method, rt.path, authorization, cookie, r.Code, r.Body)
			case authorization == "Bearer "+token && cookie == "" && r.Code != rt.asToken:
				t.Fatalf("%s %s with the real token: status %d, want %d: %s", rt.method, rt.path, r.Code, rt.asToken, r.Body)
			case authorization == "" && cookie == SessionCookie+"="+session && r.Code != rt.asSession:
				t.Fatalf("%s %s with the real session: status %d, want %d: %s", rt.method, rt.path, r.Code, rt.asSession, r.Body)
			}
			if r.Code >= http.StatusMultipleChoices {
				var env struct {
					Error string `json:"error"`
				}
				if err := json.Unmarshal(r.Body.Bytes(), &env); err != nil || env.Error == "" {
					t.Fatalf("%s %s with Authorization %q: %d body %s is not an error envelope", rt.method, rt.path, authorization, r.Code, r.Body)
				}
			}
			if !in && r.Header().Get("Set-Cookie") != "" {
				t.Fatalf("%s %s: a refusal sets a cookie: %q", rt.method, rt.path, r.Header().Get("Set-Cookie"))
			}
		}
	})
}
