package gate_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
)

// FuzzCheck feeds the proxy's check arbitrary hosts, cookies, client
// addresses, methods and URIs. Whatever comes in: only a public site or a
// real session gets a 2xx, the Cookie header passed on never carries a gate
// cookie, and a redirect stays on the gate's login page of the same host.
func FuzzCheck(f *testing.F) {
	e := newEnv(f, 0, map[string]string{"pw": gate.Password, "op": gate.Operator, "pub": gate.Public})
	valid := e.signIn(f, "pw.example.com")
	f.Add("pw.example.com", "a=1; "+gate.CookieName+"="+valid, "203.0.113.9", "GET", "/x?y=1")
	f.Add("pub.example.com:443", gate.CookieName+"=x", "", "POST", "//evil.test")
	f.Add("OP.EXAMPLE.COM.", gate.CookieName+"="+valid, "::1", "HEAD", "/\\evil")
	f.Add("op.example.com", "", "10.0.0.1, 127.0.0.1", "", "/.tunnelsvc/login")
	f.Fuzz(func(t *testing.T, host, cookie, xff, method, uri string) {
		r := httptest.NewRequest("GET", gate.CheckPath, nil)
		r.Host = host
		r.RemoteAddr = "127.0.0.1:50000"
		r.Header["Cookie"] = []string{cookie}
		r.Header["X-Forwarded-For"] = []string{xff}
		r.Header["X-Forwarded-Method"] = []string{method}
		r.Header["X-Forwarded-Uri"] = []string{uri}
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK:
			site := strings.ToLower(strings.TrimSuffix(strings.Split(host, ":")[0], "."))
			if site != "pub.example.com" && !(site == "pw.example.com" && strings.Contains(cookie, valid)) {
				t.Fatalf("let in: host %q cookie %q", host, cookie)
			}
			if strings.Contains(w.Header().Get("Cookie"), gate.CookieName+"=") && strings.Contains(w.Header().Get("Cookie"), valid) {
				t.Fatalf("passed the gate cookie on: %q", w.Header().Get("Cookie"))
			}
			for _, part := range strings.Split(w.Header().Get("Cookie"), ";") {
				if name, _, _ := strings.Cut(part, "="); strings.TrimSpace(name) == gate.CookieName {
					t.Fatalf("passed a gate cookie on: %q", w.Header().Get("Cookie"))
				}
			}
		case http.StatusFound:
			loc := w.Header().Get("Location")
			rest, ok := strings.CutPrefix(loc, gate.Prefix+"login?next=")
			if !ok {
				t.Fatalf("redirect to %q", loc)
			}
			next, err := url.QueryUnescape(rest)
			if err != nil || gate.SafeNext(next) != next {
				t.Fatalf("redirect with next %q", next)
			}
		case http.StatusUnauthorized, http.StatusForbidden:
		default:
			t.Fatalf("status %d", w.Code)
		}
	})
}

// FuzzCallback: a made-up code never signs anyone in.
func FuzzCallback(f *testing.F) {
	e := newEnv(f, 0, map[string]string{"op": gate.Operator})
	f.Add("op.example.com", "code=abc&next=/x")
	f.Add("op.example.com", "code=&next=//evil")
	f.Add("op.example.com:80", "next=%0d%0aSet-Cookie:x&code=%00")
	f.Fuzz(func(t *testing.T, host, query string) {
		r := httptest.NewRequest("GET", gate.Prefix+"callback", nil)
		r.URL.RawQuery = query
		r.Host = host
		r.RemoteAddr = "127.0.0.1:1"
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		if w.Code < 400 || len(w.Result().Cookies()) != 0 {
			t.Fatalf("callback %q %q: %d %v", host, query, w.Code, w.Header())
		}
	})
}

// FuzzLogin posts arbitrary forms to the password page: only the right
// password sets a cookie, and the redirect after it stays on the host.
func FuzzLogin(f *testing.F) {
	e := newEnv(f, 0, map[string]string{"pw": gate.Password, "op": gate.Operator})
	f.Add("pw.example.com", "password=correct+horse+battery+staple&next=%2Fa")
	f.Add("pw.example.com", "password=x&next=//evil.test")
	f.Add("op.example.com", "password=correct+horse+battery+staple")
	f.Add("pw.example.com", "password=%ff%fe&password=correct+horse+battery+staple")
	f.Fuzz(func(t *testing.T, host, form string) {
		r := httptest.NewRequest("POST", gate.Prefix+"login", strings.NewReader(form))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Host = host
		r.RemoteAddr = "127.0.0.1:1"
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		set := len(w.Result().Cookies()) > 0
		vals, _ := url.ParseQuery(form)
		right := vals.Get("password") == "correct horse battery staple"
		if set != (w.Code == http.StatusSeeOther) || (set && !right) {
			t.Fatalf("%q %q: %d cookie=%v", host, form, w.Code, set)
		}
		if loc := w.Header().Get("Location"); set && gate.SafeNext(loc) != loc {
			t.Fatalf("redirect to %q", loc)
		}
	})
}
