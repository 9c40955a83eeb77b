package localsetup_test

import (
	"context"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// The server host is each edge's own: what edge A saved is where machines
// reach A, and edge B, which joined later, does not take A's address: it
// takes its host name until it is given its own, and another edge's
// address is refused in words. A box saved before edges keeps its server
// host while it is the only edge.
func TestServerHostIsEachEdgesOwn(t *testing.T) {
	ctx := context.Background()
	defer func(h func() string) { localsetup.HostName = h }(localsetup.HostName)
	localsetup.HostName = func() string { return "vps2.example.net" }
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	host := func(s localsetup.Settings) string {
		t.Helper()
		r, err := s.Reach(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r.ServerHost
	}
	legacy := localsetup.Settings{Store: st}
	if err := legacy.SaveVPS(ctx, localsetup.VPS{Domain: "example.com", ServerHost: "a.example.com"}); err != nil {
		t.Fatal(err)
	}
	a := localsetup.Settings{Store: st, Edge: "edge-a"}
	b := localsetup.Settings{Store: st, Edge: "edge-b"}
	now := time.Now()
	if _, err := st.EdgeHeartbeat(ctx, "edge-a", "router.example.com", "", 7000, now); err != nil {
		t.Fatal(err)
	}
	if got := host(a); got != "a.example.com" {
		t.Fatalf("the only edge's server host saved before edges: %q", got)
	}
	if _, err := st.EdgeHeartbeat(ctx, "edge-b", "", "", 7000, now); err != nil {
		t.Fatal(err)
	}
	if got := host(b); got != "vps2.example.net" {
		t.Fatalf("edge B's address before it was given one: %q, want its host name", got)
	}
	// Setup on B with A's address is refused before anything starts.
	svc := &localsetup.Service{Settings: b}
	err = svc.StartInstall(ctx, localsetup.InstallRequest{Domain: "example.com", ServerHost: "Router.example.com"})
	want := "server_host: router.example.com is the address of the edge edge-a: each edge needs an address of its own " +
		"(its host name or IP address); router.<domain> is for the dashboard, on every edge"
	if err == nil || err.Error() != want {
		t.Fatalf("B installing with A's address: %v", err)
	}
	if err := b.SaveVPS(ctx, localsetup.VPS{Domain: "example.com", ServerHost: "b.example.com"}); err != nil {
		t.Fatal(err)
	}
	if err := a.SaveVPS(ctx, localsetup.VPS{Domain: "example.com", ServerHost: "a.example.com"}); err != nil {
		t.Fatal(err)
	}
	if ga, gb := host(a), host(b); ga != "a.example.com" || gb != "b.example.com" {
		t.Fatalf("server hosts: A %q, B %q", ga, gb)
	}
}
