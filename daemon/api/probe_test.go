package api

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/probe"
)

// TestProbeTunnel: an http tunnel's reachability through a TLS proxy on
// loopback, as the tunnel list shows it.
func TestProbeTunnel(t *testing.T) {
	e := newMachinesEnv(t, wide)
	proxy := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host == "wiki.example.com" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusBadGateway)
	}))
	proxy.StartTLS()
	defer proxy.Close()
	roots := x509.NewCertPool()
	roots.AddCert(proxy.Certificate())
	e.expose(t, machines.Exposure{Domain: "example.com"})
	// The web proxy is a stand-in: a TLS server of the test's.
	p := probe.New(probe.Options{Store: e.st, ProxyAddr: func(context.Context) (string, error) { return proxy.Listener.Addr().String(), nil }, Roots: roots, Now: e.srv.now,
		Domain: func(context.Context) (string, error) { return "example.com", nil }})
	e.rebuild(func(o *Options) { o.Prober = p })
	mid, _ := e.machine(t)
	wiki := e.data(t, e.do(req{method: "POST", path: "/api/tunnels", body: `{"machine_id":` + mid + `,"name":"wiki","kind":"http","local_port":80,"subdomain":"wiki"}`, cookie: e.cookie}), 201)
	graf := e.data(t, e.do(req{method: "POST", path: "/api/tunnels", body: `{"machine_id":` + mid + `,"name":"graf","kind":"http","local_port":3000,"subdomain":"graf"}`, cookie: e.cookie}), 201)
	db := e.data(t, e.do(req{method: "POST", path: "/api/tunnels", body: `{"machine_id":` + mid + `,"name":"db","kind":"tcp","local_port":5432}`, cookie: e.cookie}), 201)

	got := e.data(t, e.do(req{method: "POST", path: "/api/tunnels/" + id(wiki) + "/probe", cookie: e.cookie}), 200)
	r := got["reachability"].(map[string]any)
	if r["state"] != "up" || r["http_status"] != 204.0 || r["cert_issuer"] != "Acme Co" || r["cert_valid"] != true || r["cert_expires_at"] == nil || r["checked_at"] == nil ||
		r["cert_error"] != "" {
		t.Fatalf("wiki reachability = %v", r)
	}
	// Against the system roots httptest's certificate is not trusted: the
	// tunnel says so in words.
	e.rebuild(func(o *Options) {
		o.Prober = probe.New(probe.Options{Store: e.st, ProxyAddr: func(context.Context) (string, error) { return proxy.Listener.Addr().String(), nil },
			Now: e.srv.now, Domain: func(context.Context) (string, error) { return "example.com", nil }})
	})
	got = e.data(t, e.do(req{method: "POST", path: "/api/tunnels/" + id(wiki) + "/probe", cookie: e.cookie}), 200)
	if r := got["reachability"].(map[string]any); r["cert_valid"] != false || r["cert_error"] != "certificate not trusted: x509: certificate signed by unknown authority" {
		t.Fatalf("wiki reachability against the system roots = %v", r)
	}
	e.rebuild(func(o *Options) { o.Prober = p })
	e.data(t, e.do(req{method: "POST", path: "/api/tunnels/" + id(graf) + "/probe", cookie: e.cookie}), 200)
	for _, x := range e.list(t, "/api/tunnels") {
		tn := x.(map[string]any)
		if tn["name"] == "graf" {
			if r := tn["reachability"].(map[string]any); r["state"] != "down" || r["http_status"] != 502.0 || r["error"] == "" {
				t.Fatalf("graf in the list = %v", r)
			}
		}
	}
	wantError(t, e.do(req{method: "POST", path: "/api/tunnels/" + id(db) + "/probe", cookie: e.cookie}), 400, "only http tunnels are probed")
	wantError(t, e.do(req{method: "POST", path: "/api/tunnels/999/probe", cookie: e.cookie}), 404, "tunnel not found")
	wantError(t, e.do(req{method: "POST", path: "/api/tunnels/" + id(wiki) + "/probe"}), 401, "authentication required")
}

func id(m map[string]any) string {
	return jsonNumber(m["id"])
}

func jsonNumber(v any) string {
	f, _ := v.(float64)
	return strconv.FormatInt(int64(f), 10)
}
