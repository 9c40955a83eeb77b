package firewall_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/firewall"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

var update = flag.Bool("update", false, "rewrite golden files")

var goldenCases = []struct {
	name  string
	ports firewall.Ports
}{
	{"minimal.golden", firewall.Ports{}},
	{"typical.golden", firewall.Ports{
		ControlPort: 7000, PrivatePorts: []int{10002, 10001, 10001}, PublicTCPPorts: []int{20001},
		DashboardPort: 7380, DashboardPrivate: true,
	}},
	{"dashboard-public-bind4.golden", firewall.Ports{
		ControlPort: 7000, PrivatePorts: []int{10001}, PublicTCPPorts: []int{20001, 20002, 10001},
		DashboardPort: 7380, BindIP: "203.0.113.5",
	}},
	{"bind6.golden", firewall.Ports{ControlPort: 7000, PublicTCPPorts: []int{20001}, BindIP: "2001:db8::5"}},
	{"udp.golden", firewall.Ports{ControlPort: 7000, PrivatePorts: []int{20002}, PublicTCPPorts: []int{20001}, PublicUDPPorts: []int{20004, 20003, 443}}},
	{"udp-bind4.golden", firewall.Ports{ControlPort: 7000, PublicUDPPorts: []int{20003}, BindIP: "203.0.113.5"}},
}

// TestRenderGolden compares each rendered ruleset with its golden file,
// with or without nft installed, and has the real nft check it (nft -c)
// inside a namespace of its own: only that check needs nft and ip.
func TestRenderGolden(t *testing.T) {
	rendered := map[string]string{}
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			got, err := firewall.Render(c.ports)
			if err != nil {
				t.Fatal(err)
			}
			rendered[c.name] = got
			path := filepath.Join("testdata", c.name)
			if *update {
				os.WriteFile(path, []byte(got), 0o644)
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Fatalf("differs from %s:\n--- got\n%s--- want\n%s", path, got, want)
			}
		})
	}
	t.Run("nft -c", func(t *testing.T) {
		needTools(t)
		ns := newNetns(t)
		for _, c := range goldenCases {
			got, ok := rendered[c.name]
			if !ok {
				continue // Render failed above
			}
			f := filepath.Join(t.TempDir(), "r.nft")
			os.WriteFile(f, []byte(got), 0o644)
			nftIn(t, ns, "-c", "-f", f)
		}
		if out := nftIn(t, ns, "list", "tables"); out != "" {
			t.Fatalf("nft -c changed the namespace: %s", out)
		}
	})
}

func TestRenderRejectsBadInput(t *testing.T) {
	for _, c := range []struct {
		p   firewall.Ports
		msg string
	}{
		{firewall.Ports{PrivatePorts: []int{0}}, "private tunnel port 0 is not a port (1-65535)"},
		{firewall.Ports{PublicTCPPorts: []int{70000}}, "public tunnel port 70000 is not a port (1-65535)"},
		{firewall.Ports{ControlPort: -1}, "control port -1 is not a port (1-65535)"},
		{firewall.Ports{BindIP: "example.com"}, `bind ip "example.com" is not an IP address`},
	} {
		if _, err := firewall.Render(c.p); err == nil || err.Error() != c.msg {
			t.Errorf("%+v: %v, want %q", c.p, err, c.msg)
		}
	}
}

func TestValidMode(t *testing.T) {
	for _, m := range []string{"svc", "manual", "none"} {
		if err := firewall.ValidMode(m); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}
	for _, m := range []string{"", "SVC", "ufw", "none "} {
		if err := firewall.ValidMode(m); err == nil || err.Error() != "mode must be one of: svc, manual, none" {
			t.Errorf("%q: %v", m, err)
		}
	}
}

func openStore(t *testing.T) *store.Store {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

const foreignTable = `table inet foreign {
	chain input {
		type filter hook input priority 10; policy accept;
		tcp dport 9999 counter accept
	}
}
`

// TestSvcModeInNamespace applies the real ruleset inside a namespace and
// probes it over veth from a second one, for IPv4 and IPv6.
func TestSvcModeInNamespace(t *testing.T) {
	needTools(t)
	p := newPair(t)
	const (
		ssh, control, public, private, dashboard, unlisted = 22, 7000, 20001, 10001, 7380, 8080
	)
	p.listen(t, ssh, control, public, private, dashboard, unlisted)

	foreign := filepath.Join(t.TempDir(), "foreign.nft")
	os.WriteFile(foreign, []byte(foreignTable), 0o644)
	nftIn(t, p.srv, "-f", foreign)
	foreignBefore := nftIn(t, p.srv, "list", "table", "inet", "foreign")

	var mu sync.Mutex
	ports := firewall.Ports{
		ControlPort: control, PrivatePorts: []int{private}, PublicTCPPorts: []int{public},
		DashboardPort: dashboard, DashboardPrivate: true,
	}
	st := openStore(t)
	fw := firewall.New(firewall.Options{
		Store: st, Run: nsRunner(p.srv), RulesetPath: filepath.Join(t.TempDir(), "etc", "firewall.nft"),
		Ports: func(context.Context) (firewall.Ports, error) { mu.Lock(); defer mu.Unlock(); return ports, nil },
	})
	targets := func(ports ...int) []string {
		var out []string
		for _, n := range ports {
			out = append(out, fmt.Sprintf("%s:%d", p.srv4, n), fmt.Sprintf("[%s]:%d", p.srv6, n))
		}
		return out
	}
	expect := func(step string, want map[int]string) {
		t.Helper()
		var all []int
		for n := range want {
			all = append(all, n)
		}
		got := probe(t, p.cli, targets(all...)...)
		for n, w := range want {
			for _, tgt := range targets(n) {
				if got[tgt] != w {
					t.Errorf("%s: %s is %s, want %s", step, tgt, got[tgt], w)
				}
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	allOpen := map[int]string{ssh: "open", control: "open", public: "open", private: "open", dashboard: "open", unlisted: "open"}
	expect("before svc", allOpen)

	rec := testutil.NewProgress()
	go fw.EnterSvc(context.Background(), rec)
	if !rec.Wait(t) {
		t.Fatalf("enter svc failed:\n%s", rec.Text())
	}
	for _, want := range []string{"nft -c accepted the ruleset", "applied " + fw.RulesetPath() + " with nft -f", "mode svc is active"} {
		if !strings.Contains(rec.Text(), want) {
			t.Errorf("progress lacks %q:\n%s", want, rec.Text())
		}
	}
	expect("svc", map[int]string{ssh: "open", control: "open", public: "open", private: "closed", dashboard: "closed", unlisted: "closed"})
	// The box itself still reaches its private ports over loopback.
	if got := probe(t, p.srv, fmt.Sprintf("127.0.0.1:%d", private), fmt.Sprintf("[::1]:%d", dashboard)); got[fmt.Sprintf("127.0.0.1:%d", private)] != "open" || got[fmt.Sprintf("[::1]:%d", dashboard)] != "open" {
		t.Fatalf("loopback inside the namespace: %v", got)
	}
	d := fw.Detect(context.Background())
	if d.Mode != "svc" || !d.Nftables.Installed || !d.Nftables.SvcTable || strings.Join(d.Nftables.Tables, ",") != "inet foreign,inet tunnelsvc" {
		t.Fatalf("detect: %+v", d)
	}

	// Tunnels and settings change: the table follows on Reconcile.
	mu.Lock()
	ports.PrivatePorts, ports.PublicTCPPorts, ports.DashboardPrivate = nil, []int{public, private}, false
	mu.Unlock()
	if err := fw.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	expect("after reconcile", map[int]string{private: "open", dashboard: "open", unlisted: "closed"})

	if err := fw.SetMode(context.Background(), "manual"); err != nil {
		t.Fatal(err)
	}
	if tables := nftIn(t, p.srv, "list", "tables"); strings.TrimSpace(tables) != "table inet foreign" {
		t.Fatalf("tables after leaving svc: %q", tables)
	}
	if after := nftIn(t, p.srv, "list", "table", "inet", "foreign"); after != foreignBefore {
		t.Fatalf("foreign table changed:\n%s\nwas\n%s", after, foreignBefore)
	}
	if _, err := os.Stat(fw.RulesetPath()); !os.IsNotExist(err) {
		t.Fatalf("ruleset file still there: %v", err)
	}
	expect("manual", allOpen)
	if m, _ := fw.Mode(context.Background()); m != "manual" {
		t.Fatalf("mode %s", m)
	}
	// Reconcile outside svc changes nothing.
	if err := fw.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tables := nftIn(t, p.srv, "list", "tables"); strings.TrimSpace(tables) != "table inet foreign" {
		t.Fatalf("reconcile in manual mode: %q", tables)
	}
}

// failingNft refuses every nft -c with nft's kind of message.
type failingNft struct{}

func (failingNft) Run(_ context.Context, name string, args ...string) cmdrun.Result {
	if name == "nft" {
		return cmdrun.Result{Stderr: "Error: Could not process rule: Operation not supported\n", Err: errors.New("exit status 1")}
	}
	return cmdrun.Result{Err: fmt.Errorf("%s: %w", name, cmdrun.ErrNotInstalled)}
}

func TestRefusedRulesetChangesNothing(t *testing.T) {
	st := openStore(t)
	path := filepath.Join(t.TempDir(), "firewall.nft")
	fw := firewall.New(firewall.Options{Store: st, Run: failingNft{}, RulesetPath: path})
	rec := testutil.NewProgress()
	go fw.EnterSvc(context.Background(), rec)
	if rec.Wait(t) {
		t.Fatal("succeeded")
	}
	if !strings.Contains(rec.Text(), "error: firewall: nft -c refused the ruleset: Error: Could not process rule: Operation not supported") {
		t.Fatalf("progress:\n%s", rec.Text())
	}
	if m, _ := fw.Mode(context.Background()); m != "none" {
		t.Fatalf("mode %s after a refused ruleset", m)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("ruleset file written")
	}
}

// TestDetectWithoutTools: no firewall tool at all is an answer, not an error.
func TestDetectWithoutTools(t *testing.T) {
	fw := firewall.New(firewall.Options{Store: openStore(t), Run: missingAll{}})
	d := fw.Detect(context.Background())
	if d.Mode != "none" || d.Nftables.Installed || d.UFW.Installed || d.Firewalld.Installed || d.Iptables.Installed || len(d.Notes) != 0 || d.Nftables.Tables == nil {
		t.Fatalf("%+v", d)
	}
}

type missingAll struct{}

func (missingAll) Run(_ context.Context, name string, _ ...string) cmdrun.Result {
	return cmdrun.Result{Err: fmt.Errorf("%s: %w", name, cmdrun.ErrNotInstalled)}
}
