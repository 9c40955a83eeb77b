package revtunnel_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
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

// TestNewUserConnAfterDelete: frps asks about every connection to a tunnel
// port. Once a tunnel or its machine is deleted, the very next connection is
// refused, even right after the same connection was let through, and also
// when the deletion is written by another process (here: another handle on
// the same database, as the admin commands open it).
func TestNewUserConnAfterDelete(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	st, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sealer, _ := seal.LoadOrCreate(dir)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sp, _ := ssh.NewPublicKey(pub)
	svc := &machines.Service{Store: st, Sealer: sealer, Keys: keys{string(ssh.MarshalAuthorizedKey(sp))}, Log: log,
		Limiter: auth.NewLimiter(nil), Ports: store.PortRange{Lo: 20000, Hi: 20099}, ServerHost: "127.0.0.1", FRPSPort: 7000}
	plugin := &revtunnel.Plugin{Store: st, Log: log}

	type machine struct {
		id            int64
		user, secret  string
		tunnelProxies []string
	}
	register := func(name string) machine {
		tok, err := svc.CreateToken(ctx, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		reg, err := svc.Bootstrap(ctx, machines.BootstrapRequest{Token: tok.Token, Name: name, Username: "pi", Client: netip.MustParseAddr("127.0.0.1")})
		if err != nil {
			t.Fatal(err)
		}
		m := machine{id: reg.MachineID,
			user:   regexp.MustCompile(`(?m)^user = '([^']+)'`).FindStringSubmatch(reg.ClientConfig)[1],
			secret: regexp.MustCompile(`(?m)^token = '([^']+)'`).FindStringSubmatch(reg.ClientConfig)[1]}
		for i := 0; i < 2; i++ {
			kind, tname, port := "tcp", fmt.Sprintf("t%d", i), 8000+i
			tun, err := svc.CreateTunnel(ctx, machines.TunnelInput{MachineID: &reg.MachineID, Name: &tname, Kind: &kind, LocalPort: &port})
			if err != nil {
				t.Fatal(err)
			}
			m.tunnelProxies = append(m.tunnelProxies, fmt.Sprintf("%s.%s", m.user, frpconf.TunnelProxy(tun.ID)))
		}
		return m
	}
	// newUserConn answers frps's call as frps makes it and reports whether
	// the connection is let through.
	newUserConn := func(m machine, proxy string) bool {
		t.Helper()
		body := fmt.Sprintf(`{"version":"0.1.0","op":"NewUserConn","content":{"user":{"user":%q,"metas":{"token":%q}},"proxy_name":%q,"proxy_type":"tcp","remote_addr":"127.0.0.1:40000"}}`,
			m.user, m.secret, proxy)
		r := httptest.NewRequest("POST", frpconf.PluginPath+"?op=NewUserConn", strings.NewReader(body))
		r.RemoteAddr = "127.0.0.1:5555"
		w := httptest.NewRecorder()
		plugin.ServeHTTP(w, r)
		switch {
		case w.Code != 200:
			t.Fatalf("NewUserConn for %s: %d %s", proxy, w.Code, w.Body)
		case strings.Contains(w.Body.String(), `"reject":true`):
			return false
		case strings.Contains(w.Body.String(), `"reject":false`):
			return true
		}
		t.Fatalf("NewUserConn for %s: answer %s", proxy, w.Body)
		return false
	}

	a, b := register("alpha"), register("beta")
	for i := 0; i < 3; i++ {
		for _, m := range []machine{a, b} {
			for _, p := range m.tunnelProxies {
				if !newUserConn(m, p) {
					t.Fatalf("connection to %s refused while its machine and tunnel exist", p)
				}
			}
		}
	}
	if newUserConn(a, b.tunnelProxies[0]) {
		t.Fatal("alpha's credential opened a connection to beta's tunnel")
	}

	// The tunnel deleted through the API's code path.
	id, _ := parseTunnelID(a.tunnelProxies[0])
	if err := svc.DeleteTunnel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if newUserConn(a, a.tunnelProxies[0]) {
		t.Fatal("a deleted tunnel was let through")
	}
	if !newUserConn(a, a.tunnelProxies[1]) {
		t.Fatal("the machine's other tunnel was refused")
	}

	// The machine deleted by another process.
	other, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.DeleteMachine(ctx, b.id); err != nil {
		t.Fatal(err)
	}
	for _, p := range b.tunnelProxies {
		if newUserConn(b, p) {
			t.Fatalf("a connection to %s of a machine deleted by another process was let through", p)
		}
	}
	if !newUserConn(a, a.tunnelProxies[1]) {
		t.Fatal("another machine's tunnel was refused")
	}
}

func parseTunnelID(proxy string) (int64, error) {
	var id int64
	_, err := fmt.Sscanf(proxy[strings.Index(proxy, ".tunnel-")+len(".tunnel-"):], "%d", &id)
	return id, err
}
