package revtunnel_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// BenchmarkPluginNewUserConn measures what frps waits for on every new
// connection through a tunnel: the plugin's NewUserConn answer. It runs side
// by side with a request the plugin refuses before touching the database, so
// the ratio of the two is the cost of the ownership check itself.
// Compare with: make bench, then benchstat on bench.txt.
func BenchmarkPluginNewUserConn(b *testing.B) {
	r := newPluginRig(b, store.PortRange{Lo: 20000, Hi: 29999})
	// 50 machines with 4 tunnels each, so lookups run against a populated store.
	var m pluginMachine
	for i := 0; i < 50; i++ {
		m = r.register(b, fmt.Sprintf("m%d", i), 4)
	}
	proxy := m.proxy(3)

	call := func(b *testing.B, body string, want string) {
		b.ReportAllocs()
		for b.Loop() {
			if w := r.call(body); !strings.Contains(w.Body.String(), want) {
				b.Fatalf("answer %s", w.Body)
			}
		}
	}
	b.Run("refused-before-lookup", func(b *testing.B) {
		call(b, `{"version":"0.1.0","op":"NewUserConn","content":"not an object"}`, `"reject":true`)
	})
	b.Run("authorized", func(b *testing.B) {
		call(b, newUserConn(m.user, proxy, map[string]string{"token": m.secret}), `"reject":false`)
	})
	// What frps sends for a machine whose config pins the tunnel CA: the
	// client-level metadatas, CA included, ride on every call.
	b.Run("authorized-with-ca", func(b *testing.B) {
		ca, err := r.svc.TunnelCA(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		call(b, newUserConn(m.user, proxy, map[string]string{"token": m.secret, "ca": string(ca.CertPEM)}), `"reject":false`)
	})
}
