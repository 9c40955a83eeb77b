package app

import (
	"context"
	"slices"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
)

// The certificate watcher asks the web proxy where it serves HTTPS, for
// the dashboard's name and every HTTP tunnel's, its own domains included:
// nothing before install, bind_ip once it is set.
func TestHTTPSSites(t *testing.T) {
	ctx := context.Background()
	a := testApp(t, "")
	if addr, names, err := a.httpsSites(ctx); err != nil || addr != "" || names != nil {
		t.Fatalf("before install: %q %v %v", addr, names, err)
	}
	set := localsetup.Settings{Store: a.Store}
	if err := set.SaveVPS(ctx, localsetup.VPS{Domain: "example.com"}); err != nil {
		t.Fatal(err)
	}
	reg := bootstrapNAS(t, a)
	for _, tu := range []struct{ name, kind, sub string }{{"wiki", "http", "wiki"}, {"db", "tcp", ""}} {
		port := 8080
		in := machines.TunnelInput{MachineID: &reg.MachineID, Name: &tu.name, Kind: &tu.kind, LocalPort: &port}
		if tu.sub != "" {
			in.Subdomain = &tu.sub
			in.Domains = &[]string{"wiki.example.org"}
		}
		if _, err := a.Machines.CreateTunnel(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	addr, names, err := a.httpsSites(ctx)
	if err != nil || addr != "127.0.0.1:443" || !slices.Equal(names, []string{"router.example.com", "wiki.example.com", "wiki.example.org"}) {
		t.Fatalf("after install: %q %v %v", addr, names, err)
	}
	if err := set.SetBindIP(ctx, "192.0.2.10"); err != nil {
		t.Fatal(err)
	}
	if addr, _, _ := a.httpsSites(ctx); addr != "192.0.2.10:443" {
		t.Fatalf("with bind_ip: %q", addr)
	}
}
