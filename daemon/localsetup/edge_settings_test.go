package localsetup_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/reach"
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
		a, err := (&reach.Resolver{Settings: func(context.Context) (reach.Settings, error) { return r, nil }}).Resolve(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return a.TunnelHost
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

// TestHostSettingsAreEachEdgesOwn: the bind address and the firewall mode
// describe one host: set on edge A, edge B's stay as they were. Values
// saved cluster-wide before they were kept per edge are the oldest edge's,
// and it takes them over (AdoptHostSettings); no other edge reads them.
func TestHostSettingsAreEachEdgesOwn(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	legacy := localsetup.Settings{Store: st}
	if err := legacy.SetBindIP(ctx, "203.0.113.7"); err != nil {
		t.Fatal(err)
	}
	if err := legacy.SetFirewallMode(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, name := range []string{"edge-a", "edge-b"} {
		if _, err := st.EdgeHeartbeat(ctx, name, "", "", 7000, now); err != nil {
			t.Fatal(err)
		}
	}
	a := localsetup.Settings{Store: st, Edge: "edge-a"}
	b := localsetup.Settings{Store: st, Edge: "edge-b"}
	get := func(s localsetup.Settings) string {
		t.Helper()
		ip, err := s.BindIP(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mode, err := s.FirewallMode(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ip + " " + mode
	}
	if ga, gb := get(a), get(b); ga != "203.0.113.7 svc" || gb != " " {
		t.Fatalf("before the move: A %q, B %q", ga, gb)
	}
	if err := b.AdoptHostSettings(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.AdoptHostSettings(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetSetting(ctx, "bind_ip"); err != store.ErrNotFound {
		t.Fatalf("the cluster-wide bind_ip is still there: %v", err)
	}
	if ga, gb := get(a), get(b); ga != "203.0.113.7 svc" || gb != " " {
		t.Fatalf("after the move: A %q, B %q", ga, gb)
	}
	if err := b.SetBindIP(ctx, "198.51.100.9"); err != nil {
		t.Fatal(err)
	}
	if err := b.SetFirewallMode(ctx, "manual"); err != nil {
		t.Fatal(err)
	}
	if ga, gb := get(a), get(b); ga != "203.0.113.7 svc" || gb != "198.51.100.9 manual" {
		t.Fatalf("B's own: A %q, B %q", ga, gb)
	}
}

// TestScopesTableInDocs: docs/edges.md shows which setting is each edge's
// own as the code says (make docs writes it).
func TestScopesTableInDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/edges.md")
	if err != nil {
		t.Fatal(err)
	}
	got, ok := localsetup.ScopesSection(string(doc))
	if !ok {
		t.Fatal("docs/edges.md has no settings scopes section")
	}
	if want := localsetup.ScopesTable(); got != want {
		t.Fatalf("docs/edges.md's settings scopes are out of date: run make docs\n--- docs\n%s\n--- code\n%s", got, want)
	}
}
