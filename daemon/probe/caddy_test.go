package probe

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// TestProbeThroughRealCaddy: a real caddy on loopback serving one tunnel's
// name with its internal CA (the others get no site): the probe finds the
// site up with Caddy's issuer, reports the certificate as not trusted by
// the system, and a name caddy has no site for as down.
func TestProbeThroughRealCaddy(t *testing.T) {
	if _, err := exec.LookPath("caddy"); err != nil {
		t.Skip("caddy is not installed (scripts/install-deps.sh installs it)")
	}
	port := testutil.FreePort(t)
	conf := fmt.Sprintf(`{
	admin off
	auto_https disable_redirects
	skip_install_trust
	local_certs
}
https://wiki.example.test:%d {
	bind 127.0.0.1
	tls internal
	respond "wiki" 200
}
`, port)
	testutil.StartCaddy(t, []byte(conf), port)

	st := newStore(t)
	ids := addTunnels(t, st, "wiki", "grafana")
	p := New(Options{Store: st, ProxyAddr: at(fmt.Sprintf("127.0.0.1:%d", port)),
		Domain: func(context.Context) (string, error) { return "example.test", nil }})
	ctx := context.Background()
	// caddy issues its certificate on the first handshake: poll until it
	// serves, with a deadline for a loaded machine rather than a count.
	var up store.TunnelProbe
	testutil.Eventually(t, 30*time.Second, "wiki up through caddy", func() error {
		var err error
		if up, err = p.Probe(ctx, ids[0]); err != nil {
			return err
		}
		if up.State != "up" {
			return fmt.Errorf("%+v", up)
		}
		return nil
	})
	if up.State != "up" || up.HTTPStatus != 200 || !strings.Contains(up.CertIssuer, "Caddy Local Authority") || up.CertValid || up.CertExpiresAt.IsZero() ||
		!strings.HasPrefix(up.CertError, "certificate not trusted: x509: certificate signed by unknown authority") {
		t.Fatalf("wiki through caddy = %+v", up)
	}
	down, err := p.Probe(ctx, ids[1])
	if err != nil {
		t.Fatal(err)
	}
	// Caddy refuses the handshake for a name it has no certificate for.
	if down.State != "down" || down.Error == "" ||
		!strings.HasPrefix(down.CertError, "no certificate: the web proxy refused the TLS handshake for grafana.example.test (remote error: tls: ") {
		t.Fatalf("a name caddy does not serve = %+v", down)
	}
	t.Logf("up: %+v\ndown: %+v", up, down)
}
