package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
	"github.com/tunnelsvc/tunnelsvc/daemon/netcheck"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// TestChecklist walks the getting-started list from a fresh box to a
// reachable tunnel; the DNS step compares router.<domain> with the detected
// public IP.
func TestChecklist(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		dns := testutil.DNSServer(t, map[string]string{"router.example.test.": "192.0.2.10"})
		var publicIP atomic.Value
		var asked atomic.Int32
		publicIP.Store("198.51.100.7")
		echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			asked.Add(1)
			w.Write([]byte(publicIP.Load().(string)))
		}))
		defer echo.Close()
		e := newLocalEnvOn(t, engine, &netcheck.Checker{DNSServer: dns, EchoURLs: []string{echo.URL}})
		clock := time.Unix(1_800_000_000, 0)
		e.setup.Now = func() time.Time { return clock }
		ctx := context.Background()

		type item struct {
			done   bool
			detail string
		}
		get := func() (map[string]item, map[string]any) {
			t.Helper()
			d := e.do(req{method: "GET", path: "/api/local/checklist", cookie: e.cookie})
			if d.Code != 200 {
				t.Fatalf("checklist: %d %s", d.Code, d.Body)
			}
			data := d.json(t)["data"].(map[string]any)
			items := map[string]item{}
			var order []string
			for _, x := range data["items"].([]any) {
				m := x.(map[string]any)
				items[m["id"].(string)] = item{m["done"].(bool), m["detail"].(string)}
				order = append(order, m["id"].(string))
			}
			if want := "password domain_dns webproxy machine tunnel"; join(order) != want {
				t.Fatalf("items %v, want %s", order, want)
			}
			return items, data
		}
		wantNext := func(data map[string]any, id, step string) {
			t.Helper()
			if data["next"] != id && !(id == "" && data["next"] == nil) {
				t.Fatalf("next = %v, want %q", data["next"], id)
			}
			if data["next_step"] != step {
				t.Fatalf("next_step = %q, want %q", data["next_step"], step)
			}
		}

		items, data := get()
		if !items["password"].done || items["domain_dns"].done {
			t.Fatalf("fresh = %v", items)
		}
		wantNext(data, "domain_dns", "choose a domain in the set-up, and add a DNS A record for router.<domain> pointing at this server")

		if r := e.do(req{method: "POST", path: "/api/local/skip", body: `{"domain":"example.test"}`, cookie: e.cookie}); r.Code != 200 {
			t.Fatalf("skip: %d %s", r.Code, r.Body)
		}
		items, data = get()
		mismatch := "router.example.test resolves to 192.0.2.10, but this server's public IP is 198.51.100.7: point the DNS record at 198.51.100.7"
		if items["domain_dns"] != (item{false, mismatch}) || data["public_ip"] != "198.51.100.7" || data["dns_ip"] != "192.0.2.10" {
			t.Fatalf("mismatch = %v %v", items["domain_dns"], data)
		}
		// The detected address is trusted for PublicIPTTL: the echo service is
		// asked again only after it.
		publicIP.Store("192.0.2.10")
		if items, _ = get(); items["domain_dns"] != (item{false, mismatch}) || asked.Load() != 1 {
			t.Fatalf("within the TTL: %v, echo asked %d times", items["domain_dns"], asked.Load())
		}
		clock = clock.Add(localsetup.PublicIPTTL)
		items, data = get()
		if items["domain_dns"] != (item{true, "router.example.test resolves to 192.0.2.10, this server's public IP"}) {
			t.Fatalf("match = %v", items["domain_dns"])
		}
		wantNext(data, "webproxy", "install the web proxy and the tunnel server in the set-up")

		if err := e.setup.Settings.SaveVPS(ctx, localsetup.VPS{Domain: "example.test", ServerHost: "router.example.test", InstalledAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		items, data = get()
		if !items["webproxy"].done {
			t.Fatalf("installed = %v", items["webproxy"])
		}
		wantNext(data, "machine", "create a join token on the Machines page and run its command on the machine")

		ports := store.PortRange{Lo: 30000, Hi: 30100}
		m, err := e.st.RegisterMachine(ctx, store.NewMachine{Name: "pi", Username: "pi", SecretHash: "s", AgentTokenHash: "a",
			Seal: func(int64) (string, error) { return "x", nil }, Now: time.Now(), Ports: ports})
		if err != nil {
			t.Fatal(err)
		}
		_, data = get()
		wantNext(data, "machine", `machine "pi" registered but never connected: check revtunnel-client on it (journalctl -u revtunnel-client)`)
		if err := e.st.SetMachineStatus(ctx, m.ID, "online", time.Now()); err != nil {
			t.Fatal(err)
		}
		_, data = get()
		wantNext(data, "tunnel", "add an http tunnel to a machine on the Tunnels page")

		tn, err := e.st.InsertTunnel(ctx, store.Tunnel{MachineID: m.ID, Name: "wiki", Kind: "http", LocalPort: 80, Subdomain: "wiki"}, ports, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.st.SetTunnelProbe(ctx, store.TunnelProbe{TunnelID: tn.ID, State: "down", HTTPStatus: 502, CheckedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		_, data = get()
		wantNext(data, "tunnel", "no http tunnel answered through the proxy yet (e.g. wiki.example.test); check that the service runs on the machine, then probe again")
		if err := e.st.SetTunnelProbe(ctx, store.TunnelProbe{TunnelID: tn.ID, State: "up", HTTPStatus: 200, CheckedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		items, data = get()
		if items["tunnel"] != (item{true, "https://wiki.example.test answers"}) {
			t.Fatalf("tunnel = %v", items["tunnel"])
		}
		wantNext(data, "", "")
		wantError(t, e.do(req{method: "GET", path: "/api/local/checklist"}), 401, "authentication required")
	})
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}

// TestChecklistSaysWhatIsMissingInWords: an http tunnel before a domain is
// set names no half address, and a DNS server that fails is named with
// what it did, not as a Go error.
func TestChecklistSaysWhatIsMissingInWords(t *testing.T) {
	dns := testutil.DNSServer(t, map[string]string{"router.broken.test.": "SERVFAIL"})
	e := newLocalEnv(t, &netcheck.Checker{DNSServer: dns, EchoURLs: []string{}})
	ctx := context.Background()
	ports := store.PortRange{Lo: 30000, Hi: 30100}
	m, err := e.st.RegisterMachine(ctx, store.NewMachine{Name: "pi", Username: "pi", SecretHash: "s", AgentTokenHash: "a",
		Seal: func(int64) (string, error) { return "x", nil }, Now: time.Now(), Ports: ports})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.InsertTunnel(ctx, store.Tunnel{MachineID: m.ID, Name: "grafana", Kind: "http", LocalPort: 3000, Subdomain: "grafana"}, ports, time.Now()); err != nil {
		t.Fatal(err)
	}
	detail := func(id string) string {
		t.Helper()
		d := e.do(req{method: "GET", path: "/api/local/checklist", cookie: e.cookie})
		if d.Code != 200 {
			t.Fatalf("checklist: %d %s", d.Code, d.Body)
		}
		for _, x := range d.json(t)["data"].(map[string]any)["items"].([]any) {
			if it := x.(map[string]any); it["id"] == id {
				return it["detail"].(string)
			}
		}
		t.Fatalf("no item %s", id)
		return ""
	}
	if got, want := detail("tunnel"), `http tunnel "grafana" answers at https://grafana.<domain> once a domain is set`; got != want {
		t.Fatalf("tunnel without a domain: %q, want %q", got, want)
	}
	if r := e.do(req{method: "POST", path: "/api/local/skip", body: `{"domain":"broken.test"}`, cookie: e.cookie}); r.Code != 200 {
		t.Fatalf("skip: %d %s", r.Code, r.Body)
	}
	want := "could not look up router.broken.test: the DNS server " + dns + " answered with a server failure; check the domain's DNS zone, or try again later"
	if got := detail("domain_dns"); got != want {
		t.Fatalf("DNS failure: %q, want %q", got, want)
	}
}
