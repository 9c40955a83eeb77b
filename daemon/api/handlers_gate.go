package api

import (
	"html/template"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
)

// gateAuthorize is the dashboard's half of operator access: a browser
// signed in to the dashboard gets a one-time code for the tunnel host and
// goes back there; the dashboard's cookie itself never leaves router.<domain>.
func (s *Server) gateAuthorize(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	host := strings.ToLower(strings.TrimSpace(q.Get("host")))
	next := gate.SafeNext(q.Get("next"))
	ok, err := s.sessionValid(r)
	if err != nil {
		return Internal("could not check the session", err)
	}
	if !ok {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
		w.WriteHeader(http.StatusOK)
		return signInFirst.Execute(w, map[string]string{"Host": host, "Retry": r.URL.RequestURI()})
	}
	code, host, err := s.gate.IssueCode(host)
	if err != nil {
		return Errorf(http.StatusBadRequest, "host is not a tunnel with operator access")
	}
	// Same scheme and port as this request came by: both hosts are served
	// by the same proxy.
	port := ""
	if _, p, err := net.SplitHostPort(r.Host); err == nil {
		port = ":" + p
	}
	scheme := "http"
	if r.TLS != nil || (s.peerIsLocal(r) && strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")) {
		scheme = "https"
	}
	to := scheme + "://" + host + port + gate.Prefix + "callback?" + url.Values{"code": {code}, "next": {next}}.Encode()
	http.Redirect(w, r, to, http.StatusFound)
	return nil
}

var signInFirst = template.Must(template.New("signin").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in first</title>
<style>body{font-family:system-ui,sans-serif;max-width:28rem;margin:4rem auto;padding:0 1rem}</style>
</head><body>
<h1>Sign in first</h1>
<p>{{.Host}} is open to the operator of this dashboard only.</p>
<p><a href="/" target="_blank" rel="noopener">Sign in to the dashboard</a>, then
<a id="continue" href="{{.Retry}}">continue to {{.Host}}</a>.</p>
</body></html>
`))
