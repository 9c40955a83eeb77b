package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/monitor"
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

// A box alone (no edges) keeps its machines' status as frps reports their
// connections: a machine recorded offline whose client frps has connected
// is put online (a close told after the opening that followed it), one
// recorded online that frps no longer has is put offline; a machine that
// never connected stays pending, and a status written less than the grace
// before frps was asked (or after) is left to the plugin's calls.
func TestConnectionsAsFRPSReportsThem(t *testing.T) {
	ctx := context.Background()
	a := testApp(t, "")
	var connected atomic.Value
	connected.Store([]string{})
	frps := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/proxy/tcp" {
			http.NotFound(w, r)
			return
		}
		var ps []map[string]string
		for _, name := range connected.Load().([]string) {
			ps = append(ps, map[string]string{"name": name, "status": "online"})
		}
		json.NewEncoder(w).Encode(map[string]any{"proxies": ps})
	}))
	t.Cleanup(frps.Close)
	a.frps = &monitor.FRPS{Addr: strings.TrimPrefix(frps.URL, "http://")}
	nas := bootstrapNAS(t, a)
	status := func(id int64) string {
		m, err := a.Store.GetMachine(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return m.Status
	}
	w := &connWatch{missing: map[[2]int64]*missing{}}
	round := func(now time.Time) {
		t.Helper()
		if err := a.connRound(ctx, w, now); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	round(now)
	if s := status(nas.MachineID); s != "pending" {
		t.Fatalf("a machine that never connected: %s", s)
	}
	// Recorded offline a minute ago, connected as frps sees it.
	if err := a.Store.SetMachineStatus(ctx, nas.MachineID, "offline", now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	connected.Store([]string{fmt.Sprintf("m%d.ssh", nas.MachineID), fmt.Sprintf("m%d.agent", nas.MachineID)})
	round(now)
	if s := status(nas.MachineID); s != "online" {
		t.Fatalf("connected as frps reports, recorded offline: %s after a round", s)
	}
	// frps no longer has it, but the status was just written: left alone.
	connected.Store([]string{})
	if err := a.Store.SetMachineStatus(ctx, nas.MachineID, "online", now); err != nil {
		t.Fatal(err)
	}
	round(now.Add(connGrace / 2))
	if s := status(nas.MachineID); s != "online" {
		t.Fatalf("a status younger than the grace was changed to %s", s)
	}
	round(now.Add(connGrace + time.Second))
	if s := status(nas.MachineID); s != "offline" {
		t.Fatalf("gone as frps reports, recorded online: %s after a round", s)
	}
}
