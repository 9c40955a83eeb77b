package firewall_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/firewall"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/validate"
)

// portSet is how a set of ports looks once Shape has replaced the numbers.
var portSet = regexp.MustCompile(`\{ w(, w)* \}`)

// nftShape is a ruleset's shape with any set of ports written as one.
func nftShape(s string) []string {
	return strings.Split(portSet.ReplaceAllString(testutil.Shape(s), "{ w }"), "\n")
}

// ports reads pairs of bytes as port numbers (0 included, which is no port).
func ports(b []byte) []int {
	var out []int
	for i := 0; i+1 < len(b) && len(out) < 40; i += 2 {
		out = append(out, int(binary.BigEndian.Uint16(b[i:])))
	}
	return out
}

// FuzzFirewallRuleset: for any ports and bind_ip the validators accept,
// the ruleset is made only of lines the template can produce (no rule,
// chain or comment the input did not name) and the real nft accepts it
// (nft -c, in a network namespace of the test's own). Values the
// validators refuse are refused by Render.
func FuzzFirewallRuleset(f *testing.F) {
	// Only the nft -c check needs nft and ip: without them the structural
	// checks still run and each input's nft check is skipped.
	var ns string
	if haveNetnsTools() {
		needTools(f)
		ns = newNetns(f)
	}
	// Every line the template can produce, from plain values.
	allowed := map[string]bool{}
	for _, p := range []firewall.Ports{
		{},
		{ControlPort: 7000, PrivatePorts: []int{10001}, PublicTCPPorts: []int{20001}, DashboardPort: 7380, DashboardPrivate: true},
		{ControlPort: 7000, PublicTCPPorts: []int{20001}, DashboardPort: 7380, BindIP: "192.0.2.1"},
		{PublicTCPPorts: []int{20001}, BindIP: "2001:db8::1"},
		{PrivatePorts: []int{443}},
	} {
		r, err := firewall.Render(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, l := range nftShape(r) {
			allowed[l] = true
		}
	}
	for _, s := range []struct {
		priv, pub     []byte
		control, dash int
		dashPriv      bool
		bind          string
	}{
		{[]byte{0x27, 0x11}, []byte{0x4e, 0x21}, 7000, 7380, true, "203.0.113.5"},
		{nil, []byte{0x4e, 0x21, 0x4e, 0x22}, 7000, 7380, false, "2001:db8::5"},
		{[]byte{0x01, 0xbb}, nil, 0, 0, false, ""},
		{nil, []byte{0x4e, 0x21}, 7000, 7380, false, "fe80::1%lo\n}\nchain x {"},
		{nil, []byte{0x4e, 0x21}, 7000, 7380, false, "::ffff:203.0.113.5"},
		{nil, []byte{0x4e, 0x21}, 7000, 7380, false, "203.0.113.5 tcp dport 22 drop #"},
		{nil, []byte{0x4e, 0x21}, 7000, 7380, false, "1.2.3.4\"; flush ruleset"},
		{[]byte{0, 0}, nil, 70000, -1, false, "２０３.0.113.5"},
		{nil, []byte{0x4e, 0x21}, 7000, 7380, false, "$(id)"},
		{nil, []byte{0x4e, 0x21}, 7000, 7380, false, "`id`"},
		{nil, []byte{0x4e, 0x21}, 7000, 7380, false, "203.0.113.5 } }"},
	} {
		f.Add(s.priv, s.pub, s.control, s.dash, s.dashPriv, s.bind)
	}
	f.Fuzz(func(t *testing.T, priv, pub []byte, control, dash int, dashPriv bool, bind string) {
		p := firewall.Ports{PrivatePorts: ports(priv), PublicTCPPorts: ports(pub), ControlPort: control, DashboardPort: dash, DashboardPrivate: dashPriv}
		accepted := true
		for _, n := range append(append([]int{}, p.PrivatePorts...), p.PublicTCPPorts...) {
			accepted = accepted && validate.Port(n) == nil
		}
		// 0 means "not known" for the control and dashboard ports.
		accepted = accepted && (control == 0 || validate.Port(control) == nil) && (dash == 0 || validate.Port(dash) == nil)
		if bind != "" {
			a, err := validate.IP(bind)
			accepted = accepted && err == nil
			p.BindIP = bind
			if err == nil {
				p.BindIP = a.String()
			}
		}
		got, err := firewall.Render(p)
		if !accepted {
			if err == nil {
				t.Fatalf("Render accepted what the validators refuse: %+v\n%s", p, got)
			}
			return
		}
		if err != nil {
			t.Fatalf("Render refused %+v: %v", p, err)
		}
		for _, l := range nftShape(got) {
			if !allowed[l] {
				t.Fatalf("the ruleset for %+v has a line the template does not make: %q\n%s", p, l, got)
			}
		}
		if testutil.RealToolSample(100) {
			if ns == "" {
				needTools(t)
			}
			file := filepath.Join(t.TempDir(), "r.nft")
			if err := os.WriteFile(file, []byte(got), 0o600); err != nil {
				t.Fatal(err)
			}
			nftIn(t, ns, "-c", "-f", file)
		}
	})
}
