package gate_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
)

// A challenge the local Caddy did not order is answered by the edge that
// did, asked with the relay mark and the name the CA asked for; a relayed
// request is never relayed again; nothing else passes.
func TestACMERelay(t *testing.T) {
	var asked []string
	ordered := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Host+" "+r.Header.Get(gate.RelayHeader))
		if r.URL.Path == gate.ACMEChallengePath+"tok-1" && r.Host == "wiki.example.com" {
			io.WriteString(w, "tok-1.keyauth")
			return
		}
		http.NotFound(w, r)
	}))
	defer ordered.Close()
	// Both peers on one port number (the relay asks every edge on the
	// same HTTP port): two loopback addresses.
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(ordered.URL, "http://"))
	p, _ := strconv.Atoi(port)
	l, err := net.Listen("tcp", "127.0.0.2:"+port)
	if err != nil {
		t.Fatalf("a second loopback address on the same port: %v", err)
	}
	otherSrv := &http.Server{Handler: http.NotFoundHandler()}
	go otherSrv.Serve(l)
	defer otherSrv.Close()
	relay := &gate.ACMERelay{HTTPPort: p, Peers: func(context.Context) ([]string, error) {
		return []string{"127.0.0.2", "127.0.0.1"}, nil
	}}
	get := func(path, host string, relayed bool) (int, string) {
		r := httptest.NewRequest("GET", path, nil)
		r.Host = host
		if relayed {
			r.Header.Set(gate.RelayHeader, "1")
		}
		w := httptest.NewRecorder()
		relay.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	if code, body := get(gate.ACMEChallengePath+"tok-1", "wiki.example.com:80", false); code != 200 || body != "tok-1.keyauth" {
		t.Fatalf("relayed challenge: %d %q", code, body)
	}
	if len(asked) != 1 || asked[0] != "wiki.example.com 1" {
		t.Fatalf("the ordering edge was asked %v", asked)
	}
	for _, c := range []struct {
		path    string
		relayed bool
	}{
		{gate.ACMEChallengePath + "tok-1", true},     // one hop only
		{gate.ACMEChallengePath + "unknown", false},  // nobody ordered it
		{gate.ACMEChallengePath + "../admin", false}, // not a token
		{"/elsewhere", false},
	} {
		if code, _ := get(c.path, "wiki.example.com", c.relayed); code != http.StatusNotFound {
			t.Fatalf("%s (relayed %v): %d", c.path, c.relayed, code)
		}
	}
}
