package revtunnel_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// BenchmarkPluginNewUserConn measures what frps waits for on every new
// connection through a tunnel: the plugin's NewUserConn answer. It runs side
// by side with a request the plugin refuses before touching the database, so
// the ratio of the two is the cost of the ownership check itself.
// Compare with: make bench, then benchstat on bench.txt.
func BenchmarkPluginNewUserConn(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "data"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	sealer, _ := seal.LoadOrCreate(filepath.Join(dir, "data"))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sp, _ := ssh.NewPublicKey(pub)
	svc := &machines.Service{Store: st, Sealer: sealer, Keys: keys{string(ssh.MarshalAuthorizedKey(sp))}, Log: log,
		Limiter: auth.NewLimiter(nil), Ports: store.PortRange{Lo: 20000, Hi: 29999}, ServerHost: "127.0.0.1", FRPSPort: 7000}
	// 50 machines with 4 tunnels each, so lookups run against a populated store.
	var user, secret, proxy string
	for i := 0; i < 50; i++ {
		tok, err := svc.CreateToken(ctx, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		reg, err := svc.Bootstrap(ctx, machines.BootstrapRequest{Token: tok.Token, Name: fmt.Sprintf("m%d", i), Username: "pi", Client: netip.MustParseAddr("127.0.0.1")})
		if err != nil {
			b.Fatal(err)
		}
		var tun machines.Tunnel
		for j := 0; j < 4; j++ {
			kind, name, port := "tcp", fmt.Sprintf("t%d", j), 8000+j
			if tun, err = svc.CreateTunnel(ctx, machines.TunnelInput{MachineID: &reg.MachineID, Name: &name, Kind: &kind, LocalPort: &port}); err != nil {
				b.Fatal(err)
			}
		}
		user = regexp.MustCompile(`(?m)^user = '([^']+)'`).FindStringSubmatch(reg.ClientConfig)[1]
		secret = regexp.MustCompile(`(?m)^token = '([^']+)'`).FindStringSubmatch(reg.ClientConfig)[1]
		proxy = fmt.Sprintf("%s.tunnel-%d", user, tun.ID)
	}
	plugin := &revtunnel.Plugin{Store: st, Log: log}

	call := func(b *testing.B, body string, want string) {
		b.ReportAllocs()
		for b.Loop() {
			r := httptest.NewRequest("POST", frpconf.PluginPath+"?op=NewUserConn", strings.NewReader(body))
			r.RemoteAddr = "127.0.0.1:5555"
			w := httptest.NewRecorder()
			plugin.ServeHTTP(w, r)
			if !strings.Contains(w.Body.String(), want) {
				b.Fatalf("answer %s", w.Body)
			}
		}
	}
	b.Run("refused-before-lookup", func(b *testing.B) {
		call(b, `{"version":"0.1.0","op":"NewUserConn","content":"not an object"}`, `"reject":true`)
	})
	b.Run("authorized", func(b *testing.B) {
		body := fmt.Sprintf(`{"version":"0.1.0","op":"NewUserConn","content":{"user":{"user":%q,"metas":{"token":%q}},"proxy_name":%q,"proxy_type":"tcp","remote_addr":"127.0.0.1:40000"}}`, user, secret, proxy)
		call(b, body, `"reject":false`)
	})
	// What frps sends for a machine whose config pins the tunnel CA: the
	// client-level metadatas, CA included, ride on every call.
	b.Run("authorized-with-ca", func(b *testing.B) {
		ca, err := svc.TunnelCA(ctx)
		if err != nil {
			b.Fatal(err)
		}
		metas, _ := json.Marshal(map[string]string{"token": secret, "ca": string(ca.CertPEM)})
		body := fmt.Sprintf(`{"version":"0.1.0","op":"NewUserConn","content":{"user":{"user":%q,"metas":%s},"proxy_name":%q,"proxy_type":"tcp","remote_addr":"127.0.0.1:40000"}}`, user, metas, proxy)
		call(b, body, `"reject":false`)
	})
}
