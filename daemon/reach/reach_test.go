package reach

import (
	"context"
	"testing"
)

// TestEdgeJoinBase: a new edge joins over HTTPS only: through an HTTPS
// join base, else through https://router.<domain> once the web proxy is
// installed, even when machines join over plain HTTP (--base-url);
// otherwise there is none.
func TestEdgeJoinBase(t *testing.T) {
	proxy := Settings{Domain: "example.com", ProxyInstalled: true}
	for _, c := range []struct {
		name string
		r    Resolver
		req  *Request
		want string
	}{
		{"https base url", Resolver{BaseURL: "https://vps.example.com:8443"}, nil, "https://vps.example.com:8443"},
		{"http base url, proxy installed", Resolver{BaseURL: "http://10.0.0.1:7380", Settings: func(context.Context) (Settings, error) { return proxy, nil }}, nil, "https://router.example.com"},
		{"http base url, no proxy", Resolver{BaseURL: "http://10.0.0.1:7380"}, nil, ""},
		{"proxy installed", Resolver{Settings: func(context.Context) (Settings, error) { return proxy, nil }}, nil, "https://router.example.com"},
		{"the page's own https address", Resolver{}, &Request{Host: "vps.example.com", BaseURL: "https://vps.example.com", Port: "443"}, "https://vps.example.com"},
		{"the page's own http address", Resolver{}, &Request{Host: "10.0.0.1", BaseURL: "http://10.0.0.1:7380", Port: "7380"}, ""},
	} {
		a, err := c.r.Resolve(context.Background(), c.req)
		if err != nil || a.EdgeJoinBase != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, a.EdgeJoinBase, err, c.want)
		}
	}
}
