package gate_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
)

// BenchmarkCheck is the proxy's question on every request to a gated site,
// answered by the handler from memory: 200 tunnels (half gated), a signed-in
// browser with 30 other cookies to strip around. The goal is < 100 µs.
func BenchmarkCheck(b *testing.B) {
	e := newEnv(b, 200, map[string]string{"pw": gate.Password})
	c := e.signIn(b, "pw.example.com")
	cookie := ""
	for i := 0; i < 30; i++ {
		cookie += fmt.Sprintf("app_%d=value%d; ", i, i)
	}
	cookie += gate.CookieName + "=" + c
	r := httptest.NewRequest("GET", gate.CheckPath, nil)
	r.Host = "pw.example.com:443"
	r.RemoteAddr = "127.0.0.1:50000"
	r.Header.Set("Cookie", cookie)
	r.Header.Set("X-Forwarded-For", "203.0.113.9")
	r.Header.Set("X-Forwarded-Method", "GET")
	r.Header.Set("X-Forwarded-Uri", "/dashboard/?x=1")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		if w.Code != 200 {
			b.Fatalf("check: %d", w.Code)
		}
	}
}

// BenchmarkCheckLoopback is the same check as the proxy sees it: a real
// HTTP request over a kept-alive loopback connection to the gate listener.
func BenchmarkCheckLoopback(b *testing.B) {
	e := newEnv(b, 200, map[string]string{"pw": gate.Password})
	c := e.signIn(b, "pw.example.com")
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+gate.CheckPath, nil)
	req.Host = "pw.example.com"
	req.Header.Set("Cookie", "theme=dark; "+gate.CookieName+"="+c)
	req.Header.Set("X-Forwarded-For", "203.0.113.9")
	client := srv.Client()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := client.Do(req)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("check: %v %v", resp, err)
		}
		resp.Body.Close()
	}
}
