package agent_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/agent"
)

// streamRequest is a stream request signed as the edge signs it; tamper
// as in TestEndpoints ("", "unsigned", "body signed" signs it as an
// ordinary request).
func streamRequest(t *testing.T, srv *agent.Server, path, query, tamper string, body io.Reader) (*http.Request, string) {
	t.Helper()
	ch := challenge(t, srv, token)
	uri := path + "?" + query
	req := httptest.NewRequest("POST", uri, body)
	nonce := agent.NewNonce()
	req.Header.Set(agent.HeaderChallenge, ch)
	req.Header.Set(agent.HeaderNonce, nonce)
	switch tamper {
	case "":
		req.Header.Set(agent.HeaderSignature, agent.StreamSignature(token, "POST", uri, ch, nonce))
	case "body signed":
		req.Header.Set(agent.HeaderSignature, agent.RequestSignature(token, "POST", uri, nil, ch, nonce))
	}
	return req, nonce
}

// The stream routes take only requests signed with the agent token, each
// challenge once, within the bounds; a download is measured as it
// arrives and the upload's count is signed in the trailer.
func TestSpeedTestRoutes(t *testing.T) {
	srv := &agent.Server{Token: token, Unit: "revtunnel-client.service", Sys: &fakeSys{}}
	for _, tamper := range []string{"unsigned", "body signed"} {
		req, _ := streamRequest(t, srv, agent.PathSpeedUpload, agent.SpeedQuery(1, 1000), tamper, nil)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != 401 || rec.Body.Len() > 200 {
			t.Fatalf("%s: %d %s", tamper, rec.Code, rec.Body)
		}
	}
	for _, q := range []string{"seconds=0&bytes=1", "seconds=11&bytes=1", "seconds=1&bytes=0", "seconds=1&bytes=268435457", "bytes=1"} {
		req, nonce := streamRequest(t, srv, agent.PathSpeedDownload, q, "", strings.NewReader("x"))
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != 400 || !agent.SignatureOK(rec.Header().Get(agent.HeaderSignature), agent.ResponseSignature(token, nonce, 400, rec.Body.Bytes())) {
			t.Fatalf("%s: %d %s (a refusal, signed)", q, rec.Code, rec.Body)
		}
	}

	// A download: what arrived, answered signed.
	body := strings.Repeat("x", 3<<20)
	req, nonce := streamRequest(t, srv, agent.PathSpeedDownload, agent.SpeedQuery(2, 4<<20), "", strings.NewReader(body))
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	var got agent.Transfer
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &got) != nil || got.Bytes != 3<<20 {
		t.Fatalf("download: %d %s", rec.Code, rec.Body)
	}
	if !agent.SignatureOK(rec.Header().Get(agent.HeaderSignature), agent.ResponseSignature(token, nonce, 200, rec.Body.Bytes())) {
		t.Fatal("the download's answer is not signed")
	}
	// More than asked is refused.
	req, _ = streamRequest(t, srv, agent.PathSpeedDownload, agent.SpeedQuery(2, 1000), "", strings.NewReader(body))
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "more than the 1000 bytes asked arrived") {
		t.Fatalf("too much: %d %s", rec.Code, rec.Body)
	}

	// An upload stops at its byte bound and signs its count.
	req, nonce = streamRequest(t, srv, agent.PathSpeedUpload, agent.SpeedQuery(5, 200_000), "", nil)
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	res := rec.Result()
	if rec.Code != 200 || rec.Body.Len() != 200_000 {
		t.Fatalf("upload: %d, %d bytes", rec.Code, rec.Body.Len())
	}
	if !agent.SignatureOK(res.Trailer.Get(agent.HeaderSignature), agent.UploadSignature(token, nonce, 200_000)) {
		t.Fatalf("the upload's trailer is not its signed count: %v", res.Trailer)
	}
	// Its time bound: a second, whatever the bytes asked.
	req, _ = streamRequest(t, srv, agent.PathSpeedUpload, agent.SpeedQuery(1, agent.MaxSpeedBytes), "", nil)
	rec = httptest.NewRecorder()
	start := time.Now()
	srv.ServeHTTP(rec, req)
	if d := time.Since(start); d < time.Second || d > 3*time.Second {
		t.Fatalf("a one-second upload took %s", d)
	}
}

// The path MTU toward an address, as the kernel has it: loopback's.
func TestSpeedTestMTU(t *testing.T) {
	srv := &agent.Server{Token: token, Unit: "revtunnel-client.service", Sys: &fakeSys{}}
	code, body := do(t, srv, "POST", agent.PathSpeedMTU, `{"host":"127.0.0.1"}`)
	var p agent.PathMTU
	if code != 200 || json.Unmarshal([]byte(body), &p) != nil || p.Address != "127.0.0.1" || p.MTU < 1280 || p.Payload != p.MTU-28 {
		t.Fatalf("POST /speedtest/mtu: %d %s", code, body)
	}
	if code, body := do(t, srv, "POST", agent.PathSpeedMTU, `{}`); code != 400 {
		t.Fatalf("no host: %d %s", code, body)
	}
}

// The steady rate leaves out the first quarter of the interval.
func TestMeter(t *testing.T) {
	var m agent.Meter
	t0 := time.Unix(1000, 0)
	// Slow for the first second (slow start), then 1 MB every 100 ms.
	m.Add(1000, t0)
	m.Add(1000, t0.Add(500*time.Millisecond))
	for i := 1; i <= 30; i++ {
		m.Add(1_000_000, t0.Add(time.Second+time.Duration(i)*100*time.Millisecond))
	}
	got := m.Result()
	if got.Bytes != 30_002_000 || got.Seconds != 4 {
		t.Fatalf("%+v", got)
	}
	// A quarter of 4 s: the steady part runs from the sample at 0.5 s
	// (the last before 1 s) to 4 s.
	if got.SteadyBytes != 30_000_000 || got.SteadySeconds != 3.5 {
		t.Fatalf("steady part %+v", got)
	}
	if mbps := got.Mbps(); mbps < 68.5 || mbps > 68.6 {
		t.Fatalf("%.2f Mbit/s, want 68.57", mbps)
	}
}
