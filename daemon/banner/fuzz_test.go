package banner_test

import (
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/banner"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
)

// FuzzJailFile: for any ban settings and whitelist entries the API accepts
// (Config.Validate, and NormalizeEntry, which the whitelist endpoints
// apply), the jail file has exactly the shape of one rendered from plain
// values (no section, key or interpolation the input did not name) and
// fail2ban-client --test accepts it. Anything else is refused by
// RenderJail.
func FuzzJailFile(f *testing.F) {
	for _, s := range []struct {
		e1, e2               string
		retry, find, banTime int
	}{
		{"203.0.113.7", "2001:db8::/48", 5, 600, 3600},
		{"10.1.2.3/24", "::ffff:198.51.100.9", 1, 10, 10},
		{"fe80::1%lo", "203.0.113.7", 5, 600, 3600},
		{"203.0.113.7\n[sshd]\nenabled = false", "1.2.3.4", 5, 600, 3600},
		{"%(known/action)s", "1.2.3.4", 5, 600, 3600},
		{"1.2.3.4 # x", "1.2.3.4;", 5, 600, 3600},
		{"0.0.0.0/0", "1.2.3.4", 5, 600, 3600},
		{"１.2.3.4", "1.2.3.4", 0, 5, -1},
		{"\"1.2.3.4\"", "'1.2.3.4'", 5, 600, 3600},
		{"$(id)", "`id`", 5, 600, 3600},
		{"{1.2.3.4}", "[sshd]", 5, 600, 3600},
	} {
		f.Add(s.e1, s.e2, s.retry, s.find, s.banTime)
	}
	f.Fuzz(func(t *testing.T, e1, e2 string, retry, find, banTime int) {
		c := banner.Config{MaxRetry: retry, FindTime: find, BanTime: banTime}
		n1, err1 := banner.NormalizeEntry(e1)
		n2, err2 := banner.NormalizeEntry(e2)
		p := banner.JailParams{Config: c, Whitelist: []string{n1, n2}}
		if err1 != nil || err2 != nil {
			p.Whitelist = []string{e1, e2}
		}
		got, err := banner.RenderJail(p)
		if c.Validate() != nil || err1 != nil || err2 != nil {
			if err == nil {
				t.Fatalf("RenderJail accepted what the API refuses: %+v\n%s", p, got)
			}
			return
		}
		if err != nil {
			t.Fatalf("RenderJail refused %+v: %v", p, err)
		}
		want, err := banner.RenderJail(banner.JailParams{Config: banner.DefaultConfig, Whitelist: []string{"192.0.2.1", "198.51.100.0/24"}})
		if err != nil {
			t.Fatal(err)
		}
		if testutil.Shape(got) != testutil.Shape(want) {
			t.Fatalf("the jail file for %+v has a shape of its own:\n%s\n--- plain values give\n%s", p, got, want)
		}
		if testutil.RealToolSample(500) {
			if ok, out := fail2banTest(t, map[string]string{
				"jail.d/tunnelsvc.local": got, "filter.d/tunnelsvc-auth.conf": banner.FilterText,
			}); !ok {
				t.Fatalf("fail2ban-client --test refused the jail file for %+v:\n%s\n%s", p, out, got)
			}
		}
	})
}
