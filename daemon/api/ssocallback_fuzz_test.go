package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/sso"
)

// ssoStatePlaceholder in a fuzzed query stands for the state of a sign-in
// started just before (GET /api/auth/sso/start), so the fuzzer reaches
// past the state check, to the code's exchange at the provider.
const ssoStatePlaceholder = "@STATE@"

// fakeIdPRefusal is what the fake provider's token endpoint answers every
// code with: no fuzzed callback can sign in.
const fakeIdPRefusal = `{"error":"invalid_grant","error_description":"the code is not valid"}`

// fakeIdP is an OpenID provider that answers discovery (so the settings
// can be saved as an operator saves them) and refuses every code.
func fakeIdP(tb testing.TB) *httptest.Server {
	tb.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                srv.URL,
			"authorization_endpoint":                srv.URL + "/authorize",
			"token_endpoint":                        srv.URL + "/token",
			"jwks_uri":                              srv.URL + "/jwks",
			"userinfo_endpoint":                     srv.URL + "/userinfo",
			"response_types_supported":              []string{"code"},
			"subject_types_supported":               []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"keys":[]}`))
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(fakeIdPRefusal))
	})
	return srv
}

// ssoErrorOf is the sso_error the login page is sent with by a redirect
// to loc ("/#/login?sso_error=..."), and whether there is one. It reads
// the fragment as written (escaped): URL.Fragment would unescape an "&"
// inside the message into a separator.
func ssoErrorOf(loc string) (string, bool) {
	_, frag, ok := strings.Cut(loc, "#")
	if !ok {
		return "", false
	}
	_, q, ok := strings.Cut(frag, "?")
	if !ok {
		return "", false
	}
	v, err := url.ParseQuery(q)
	if err != nil || !v.Has("sso_error") {
		return "", false
	}
	return v.Get("sso_error"), true
}

// checkSSOError fails t unless why, the sso_error of a refused callback
// with raw query raw, is one of the daemon's reason codes (sso.Reasons):
// the login page shows only their fixed sentences, so nothing of the
// request can reach it.
func checkSSOError(t *testing.T, why, raw string) {
	t.Helper()
	if _, ok := sso.Reasons[why]; !ok {
		t.Fatalf("callback %q: sso_error %q is not a reason code", raw, why)
	}
}

// FuzzSSOCallbackQuery sends arbitrary raw queries to the callback of a
// daemon whose single sign-on is on, through a provider that refuses
// every code (@STATE@ in a query stands for the state of a sign-in
// started just before, whose cookies the callback then gets, as from the
// browser that started it). Whatever arrives: no 5xx and no session: the
// answer is a 303 to a page of this site (a path: "/" and not "//" or
// "/\"), with no tunnel_session cookie, that sends the login page an
// sso_error saying why (checkSSOError).
func FuzzSSOCallbackQuery(f *testing.F) {
	for _, s := range []string{
		"",
		"state=@STATE@&code=abc",
		"code=abc&state=@STATE@&state=forged",
		"state=forged&code=c",
		"state=@STATE@",
		"code=c",
		"error=access_denied&error_description=End-User+aborted+interaction&state=x",
		"error=access_denied&state=@STATE@",
		"error=%0d%0aSet-Cookie:+tunnel_session=x",
		"state=%00&code=%ff%fe",
		"state=@STATE@&code=abc&next=//evil.example&return_to=https://evil.example",
		"state=@STATE@;code=abc",
		"state=%zz&code=%",
		"sso_error=injected&state=x&code=y",
		"state=" + strings.Repeat("A", 4096) + "&code=" + strings.Repeat("B", 4096),
		"state=@STATE@&code=abc#frag",
	} {
		f.Add(s)
	}
	e := newEnv(f)
	cookie := e.setup()
	idp := fakeIdP(f)
	if r := e.do(req{method: "PUT", path: "/api/auth/sso", cookie: cookie,
		body: `{"enabled":true,"issuer":"` + idp.URL + `","client_id":"c","client_secret":"s","emails":["op@example.com"]}`}); r.Code != 200 {
		f.Fatalf("PUT /api/auth/sso: %d %s", r.Code, r.Body)
	}
	// start starts a sign-in as a browser does and returns its state and
	// the cookies the start set (the flow is bound to the browser that
	// started it), which the callback then sends back.
	start := func(t testing.TB) (string, []*http.Cookie) {
		r := e.do(req{method: "GET", path: "/api/auth/sso/start"})
		to, err := url.Parse(r.Header().Get("Location"))
		if r.Code != 303 || err != nil || !strings.HasPrefix(to.String(), idp.URL+"/authorize?") || to.Query().Get("state") == "" {
			t.Fatalf("GET /api/auth/sso/start: %d %q", r.Code, r.Header().Get("Location"))
		}
		return to.Query().Get("state"), r.Result().Cookies()
	}
	f.Fuzz(func(t *testing.T, raw string) {
		e.t = t
		var cookies []*http.Cookie
		if strings.Contains(raw, ssoStatePlaceholder) {
			var state string
			state, cookies = start(t)
			raw = strings.ReplaceAll(raw, ssoStatePlaceholder, state)
		}
		// The query as given, byte for byte: httptest.NewRequest would
		// refuse (panic on) a request line with a space or a CR in it.
		r := httptest.NewRequest("GET", "/api/auth/sso/callback", nil)
		r.URL.RawQuery = raw
		for _, c := range cookies {
			r.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
		}
		r.RemoteAddr = "198.51.100.30:5000"
		r.Host = "127.0.0.1:7380"
		w := httptest.NewRecorder()
		checkedHandler(t, e.srv).ServeHTTP(w, r)
		loc := w.Header().Get("Location")
		if w.Code != http.StatusSeeOther {
			t.Fatalf("callback %q: status %d, want 303: %s", raw, w.Code, w.Body)
		}
		if !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, `/\`) || strings.ContainsAny(loc, "\r\n") {
			t.Fatalf("callback %q: redirect to %q, which is not a page of this site", raw, loc)
		}
		for _, c := range w.Result().Cookies() {
			if c.Name == SessionCookie {
				t.Fatalf("callback %q: sets a session cookie: %v", raw, c)
			}
		}
		why, ok := ssoErrorOf(loc)
		if !ok {
			t.Fatalf("callback %q: redirect to %q says no sso_error", raw, loc)
		}
		checkSSOError(t, why, raw)
	})
}
