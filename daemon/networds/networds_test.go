package networds

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// Real failures of real requests on loopback, in words: what each says,
// and never Go's words for the operation.
func TestSay(t *testing.T) {
	closed := func() string { return fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)) }
	// A listener that accepts and never answers, and one that reads each
	// request and closes the connection without an answer (read first: a
	// close before the request arrives is a reset, or an idle connection
	// closed, by the time the client writes).
	silent := accepting(t, func(c net.Conn) { go func() { io.Copy(io.Discard, c); c.Close() }() })
	hangup := accepting(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		c.Close()
	})
	tlsServer := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsServer.Close()
	noDNS := closed()
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "udp", noDNS)
	}}
	get := func(url string, timeout time.Duration, r *net.Resolver) error {
		c := &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: (&net.Dialer{Resolver: r}).DialContext}}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	refused := closed()
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"refused", get("http://"+refused+"/x", 5*time.Second, nil), "nothing accepts connections at " + refused},
		{"no answer", get("http://"+silent.Addr().String()+"/", 300*time.Millisecond, nil), "no answer from " + silent.Addr().String() + " in time"},
		{"hang-up", get("http://"+hangup.Addr().String()+"/", 5*time.Second, nil), hangup.Addr().String() + " closed the connection before answering"},
		{"untrusted certificate", get(tlsServer.URL, 5*time.Second, nil), "not signed by an authority this server trusts"},
		{"DNS server away", get("http://ntfy.example.test/topic", 5*time.Second, resolver), "ntfy.example.test could not be looked up in DNS"},
	} {
		if c.err == nil {
			t.Fatalf("%s: no error", c.name)
		}
		got := Say(c.err)
		if !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q (from %v)", c.name, got, c.want, c.err)
		}
		for _, raw := range []string{"dial tcp", "lookup ", "context deadline", "EOF", "Client.Timeout"} {
			if strings.Contains(got, raw) {
				t.Errorf("%s: %q says %q", c.name, got, raw)
			}
		}
	}
	// An error that is not a network failure keeps its own words.
	own := fmt.Errorf("another program (uid 65534) holds the agent port 20002 of machine 1")
	if got := Say(own); got != own.Error() {
		t.Errorf("not a network failure: %q", got)
	}
}

// accepting is a loopback listener that hands each connection to handle,
// closed when the test ends.
func accepting(t *testing.T, handle func(net.Conn)) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testutil.AcceptEach(t, l, handle)
	return l
}
