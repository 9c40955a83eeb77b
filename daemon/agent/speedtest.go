package agent

// Speed tests (issue 50): the edge measures the link to a machine through
// the machine's own agent tunnel, the path its tunnels take. Two routes
// stream, which the buffered, signed answer of the other routes cannot:
//
//   - POST /speedtest/download: the edge streams filler to the agent, which
//     reads it, discards it and answers (signed, as usual) what it
//     received and when (a Transfer);
//   - POST /speedtest/upload: the agent streams filler to the edge and
//     signs, in a trailer, how many bytes it sent.
//
// Each is bounded by the request: at most MaxSpeedSeconds and
// MaxSpeedBytes. Their requests are authenticated as every other request
// is (a challenge of this agent, a fresh nonce, the agent token), but the
// signature leaves out the body, filler whose length nobody knows before
// it is sent (StreamSignature). The round-trip time needs no route of its
// own: the edge times GET /challenge, a small signed answer. The path MTU
// is POST /speedtest/mtu (pathmtu_linux.go).

import (
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"
)

// SpeedTestCapability is listed by agents that take the speed test routes.
const SpeedTestCapability = "speedtest"

// A direction's bounds: whichever comes first ends it.
const (
	MaxSpeedSeconds = 10
	MaxSpeedBytes   = 256 << 20
)

// Speed test routes.
const (
	PathSpeedDownload = "/speedtest/download"
	PathSpeedUpload   = "/speedtest/upload"
	PathSpeedMTU      = "/speedtest/mtu"
)

// SpeedGrace is how long past its time budget the receiving side of a
// direction still reads (what the links between held when the sender
// stopped) before it gives up.
const SpeedGrace = 5 * time.Second

// StreamSignature is the edge's signature of a stream request: that of
// RequestSignature without the body.
func StreamSignature(token, method, uri, challenge, nonce string) string {
	return mac(token, "tunnel-agent stream request v1", method, uri, challenge, nonce)
}

// UploadSignature is the agent's signature, in its answer's trailer, of
// how many bytes of filler it sent for the request that carried nonce.
func UploadSignature(token, nonce string, sent int64) string {
	return mac(token, "tunnel-agent upload v1", nonce, strconv.FormatInt(sent, 10))
}

// Filler is what speed tests send: random bytes, so that nothing on the
// way can compress them.
var Filler = func() []byte {
	b := make([]byte, 64<<10)
	r := mrand.NewChaCha8([32]byte{'t', 'u', 'n', 'n', 'e', 'l', 's', 'v', 'c'})
	r.Read(b)
	return b
}()

// FillerReader is what the sending side of a speed test's direction sends
// (the edge for a download, the agent for an upload): Filler over and
// over, until budget has passed since the first read or limit bytes were
// read. sent counts the bytes read so far.
type FillerReader struct {
	Budget time.Duration
	Left   int64
	Sent   *atomic.Int64
	start  time.Time
}

func (f *FillerReader) Read(p []byte) (int, error) {
	if f.start.IsZero() {
		f.start = time.Now()
	}
	if f.Left <= 0 || time.Since(f.start) >= f.Budget {
		return 0, io.EOF
	}
	n := copy(p[:min(int64(len(p)), f.Left)], Filler)
	f.Left -= int64(n)
	f.Sent.Add(int64(n))
	return n, nil
}

// SpeedQuery is a stream request's bounds, as its query says them.
func SpeedQuery(seconds int, bytes int64) string {
	return fmt.Sprintf("seconds=%d&bytes=%d", seconds, bytes)
}

// speedBounds reads and checks a stream request's bounds.
func speedBounds(q url.Values) (time.Duration, int64, error) {
	secs, err := strconv.Atoi(q.Get("seconds"))
	if err != nil || secs < 1 || secs > MaxSpeedSeconds {
		return 0, 0, fmt.Errorf("seconds must be 1 to %d", MaxSpeedSeconds)
	}
	n, err := strconv.ParseInt(q.Get("bytes"), 10, 64)
	if err != nil || n < 1 || n > MaxSpeedBytes {
		return 0, 0, fmt.Errorf("bytes must be 1 to %d", MaxSpeedBytes)
	}
	return time.Duration(secs) * time.Second, n, nil
}

// serveStream answers the stream routes: the request's signature leaves
// out its body (StreamSignature); the rest is checked as ServeHTTP does.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request) {
	nonce := r.Header.Get(HeaderNonce)
	ch := r.Header.Get(HeaderChallenge)
	if s.Token == "" || !ValidNonce(nonce) || !SignatureOK(r.Header.Get(HeaderSignature), StreamSignature(s.Token, r.Method, r.URL.RequestURI(), ch, nonce)) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "a request signed with the agent token is required"})
		return
	}
	rec := newBuffered()
	if r.Method != http.MethodPost {
		writeJSON(rec, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
		s.reply(w, nonce, rec)
		return
	}
	if err := s.challenges.redeem(ch, s.now()); err != nil {
		writeJSON(rec, http.StatusUnauthorized, map[string]string{"error": err.Error()})
		s.reply(w, nonce, rec)
		return
	}
	budget, limit, err := speedBounds(r.URL.Query())
	if err != nil {
		writeJSON(rec, http.StatusBadRequest, map[string]string{"error": err.Error()})
		s.reply(w, nonce, rec)
		return
	}
	if r.URL.Path == PathSpeedUpload {
		s.upload(w, nonce, budget, limit)
		return
	}
	t, err := Receive(r.Body, budget, limit, http.NewResponseController(w), nil)
	if err != nil {
		writeJSON(rec, http.StatusBadRequest, map[string]string{"error": err.Error()})
	} else {
		writeJSON(rec, http.StatusOK, t)
	}
	s.reply(w, nonce, rec)
}

// Deadliner sets a connection's read deadline (http.ResponseController,
// net.Conn).
type Deadliner interface{ SetReadDeadline(time.Time) error }

// Receive reads one direction of a speed test to its end, as its
// receiving side (the agent for a download, the edge for an upload): at
// most limit bytes, and no longer than budget and SpeedGrace after its
// first byte. arrived, when not nil, is told the bytes so far.
func Receive(body io.Reader, budget time.Duration, limit int64, rc Deadliner, arrived func(int64)) (Transfer, error) {
	var m Meter
	buf := make([]byte, 64<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			now := time.Now()
			if m.Bytes() == 0 {
				rc.SetReadDeadline(now.Add(budget + SpeedGrace))
			}
			m.Add(n, now)
			if arrived != nil {
				arrived(m.Bytes())
			}
		}
		if m.Bytes() > limit {
			return Transfer{}, fmt.Errorf("more than the %d bytes asked arrived", limit)
		}
		if err == io.EOF {
			return m.Result(), nil
		}
		if err != nil {
			return Transfer{}, fmt.Errorf("the stream broke off after %d bytes: %v", m.Bytes(), err)
		}
	}
}

// upload streams filler for budget or limit bytes, whichever comes first,
// then signs how much it sent in the trailer.
func (s *Server) upload(w http.ResponseWriter, nonce string, budget time.Duration, limit int64) {
	w.Header().Set("Trailer", HeaderSignature)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(budget + SpeedGrace))
	var sent atomic.Int64
	if _, err := io.Copy(w, &FillerReader{Budget: budget, Left: limit, Sent: &sent}); err != nil {
		s.log().Warn("speed test upload broke off", "sent", sent.Load(), "err", err)
		return
	}
	w.Header().Set(HeaderSignature, UploadSignature(s.Token, nonce, sent.Load()))
}

// PathMTU is POST /speedtest/mtu's answer: the kernel's path MTU toward
// the edge, and the largest ICMP echo payload that passes unfragmented
// (what `ping -M do -s` takes): the MTU less the IP and ICMP headers.
type PathMTU struct {
	Address string `json:"address"`
	MTU     int    `json:"mtu"`
	Payload int    `json:"payload"`
}

// mtuRequest is POST /speedtest/mtu's body: the host the machine's tunnel
// client dials for the edge that asks.
type mtuRequest struct {
	Host string `json:"host"`
}

func (s *Server) speedMTU(w http.ResponseWriter, body []byte) {
	var req mtuRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Host == "" || len(req.Host) > 253 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": `the body must be {"host": "<the edge's address>"}`})
		return
	}
	p, err := pathMTU(req.Host)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": "could not read the path MTU toward " + req.Host + ": " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, p)
}
