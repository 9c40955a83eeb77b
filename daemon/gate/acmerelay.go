package gate

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ACMEChallengePath is where ACME HTTP-01 challenges arrive.
const ACMEChallengePath = "/.well-known/acme-challenge/"

// RelayHeader marks a challenge request one edge relays to another. The
// edge receiving it answers from its own Caddy (which answers the
// challenges it ordered before any route) or not at all: one hop, so two
// edges never send a request back and forth.
const RelayHeader = "X-Tunnelsvc-Acme-Relay"

// RelayTimeout bounds how long a relayed challenge waits for the other
// edges (the CA's own validation request waits about 10 s).
const RelayTimeout = 8 * time.Second

// ACMERelay answers the ACME HTTP-01 challenges the local Caddy did not
// order: with DNS sending every name to every edge, the CA's validation
// request for a certificate edge A ordered may reach edge B. B's Caddy
// passes it here, and the relay asks the other edges at once; the answer
// of the one that ordered it is the answer.
type ACMERelay struct {
	// Peers returns the addresses (host or IP) of the other edges that
	// are up.
	Peers func(ctx context.Context) ([]string, error)
	// HTTPPort is the port the other edges' Caddy serves HTTP on (0: 80).
	HTTPPort int
	// Client asks the other edges (nil: a client that never follows
	// redirects).
	Client *http.Client
	Log    *slog.Logger
}

func validToken(t string) bool {
	if t == "" || len(t) > 256 {
		return false
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func (a *ACMERelay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token := strings.TrimPrefix(r.URL.Path, ACMEChallengePath)
	if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, ACMEChallengePath) || !validToken(token) {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get(RelayHeader) != "" {
		http.Error(w, "no challenge of this edge has this token", http.StatusNotFound)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), RelayTimeout)
	defer cancel()
	peers, err := a.Peers(ctx)
	if err != nil || len(peers) == 0 {
		http.Error(w, "no challenge of this edge has this token, and no other edge to ask", http.StatusNotFound)
		return
	}
	client := a.Client
	if client == nil {
		client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	port := a.HTTPPort
	if port == 0 {
		port = 80
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	answers := make(chan []byte, len(peers))
	for _, p := range peers {
		go func() {
			answers <- a.ask(ctx, client, net.JoinHostPort(p, strconv.Itoa(port)), host, token)
		}()
	}
	for range peers {
		if body := <-answers; body != nil {
			w.Header().Set("Content-Type", "text/plain")
			w.Write(body)
			return
		}
	}
	http.Error(w, "no edge has a challenge with this token", http.StatusNotFound)
}

// ask asks one edge for the challenge's answer; nil when it has none.
func (a *ACMERelay) ask(ctx context.Context, client *http.Client, addr, host, token string) []byte {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+ACMEChallengePath+token, nil)
	if err != nil {
		return nil
	}
	req.Host = host
	req.Header.Set(RelayHeader, "1")
	res, err := client.Do(req)
	if err != nil {
		if a.Log != nil {
			a.Log.Debug("acme relay: an edge did not answer", "edge", addr, "err", err)
		}
		return nil
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, 4096))
	if err != nil || len(body) == 0 {
		return nil
	}
	return body
}
