package validate

import (
	"strings"
	"testing"
)

// hostile are inputs that tried (or could try) to break out of a value in
// a generated file: newlines, braces, quotes, zones, comments, shell and
// placeholder syntax, and non-ASCII look-alikes.
var hostile = []string{
	"fe80::1%lo\n}\nimport /etc/shadow\n{",
	"fe80::1%lo", "fe80::1%eth0", "::ffff:10.0.0.1%x", "10.0.0.0%x/8",
	"203.0.113.5\n", "203.0.113.5 }", " 203.0.113.5", "203.0.113.5#x",
	"example.com\n}", "example.com {", "a\"b.com", "a'b.com", "a`id`.com",
	"$(id).com", "${HOME}.com", "{$HOME}", "{{ .Envs.HOME }}", "a;b.com",
	"exa\u200bmple.com", "ex\u0430mple.com", "例え.jp", "a\\b.com", "a%b.com",
	"", ".", "a..b", "-a.com", "a-.com", strings.Repeat("a", 64) + ".com",
}

// plain is what an accepted value may contain.
const plain = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:/[]_~+@"

func TestHostileValuesAreRefused(t *testing.T) {
	for _, s := range hostile {
		if Hostname(s) == nil {
			t.Errorf("Hostname accepted %q", s)
		}
		if _, err := IP(s); err == nil {
			t.Errorf("IP accepted %q", s)
		}
		if _, err := Host(s); err == nil {
			t.Errorf("Host accepted %q", s)
		}
		if _, err := IPOrPrefix(s); err == nil {
			t.Errorf("IPOrPrefix accepted %q", s)
		}
		if HostPort(s+":80") == nil {
			t.Errorf("HostPort accepted %q", s+":80")
		}
		if BaseURL("https://"+s) == nil {
			t.Errorf("BaseURL accepted %q", "https://"+s)
		}
		if HTTPSURL("https://"+s+"/directory") == nil {
			t.Errorf("HTTPSURL accepted %q as a host", s)
		}
		// In a path, plain labels are fine; anything special is not.
		special := strings.IndexFunc(s, func(r rune) bool { return r > 127 || strings.ContainsRune(" \n\"'`${}%#;\\", r) }) >= 0
		if special && HTTPSURL("https://example.com/"+s) == nil {
			t.Errorf("HTTPSURL accepted %q in its path", s)
		}
		if special && AbsPath("/etc/"+s) == nil {
			t.Errorf("AbsPath accepted %q", "/etc/"+s)
		}
	}
}

func TestURLsAndPaths(t *testing.T) {
	for _, s := range []string{"https://acme-staging-v02.api.letsencrypt.org/directory", "https://127.0.0.1:14000/dir", "https://[::1]:14000/a~b/c-d_e.f", "https://ca.internal"} {
		if err := HTTPSURL(s); err != nil {
			t.Errorf("HTTPSURL(%q): %v", s, err)
		}
	}
	for _, s := range []string{"http://ca.internal/dir", "https://u@ca/dir", "https://ca/dir?x=1", "https://ca/dir#f", "https://ca/a b", "https://ca/{$HOME}", "https://ca/%7B", "https://[fe80::1%lo]/d"} {
		if HTTPSURL(s) == nil {
			t.Errorf("HTTPSURL accepted %q", s)
		}
	}
	for _, s := range []string{"/etc/ssl/root.pem", "/var/lib/x/ca+1@2.pem"} {
		if err := AbsPath(s); err != nil {
			t.Errorf("AbsPath(%q): %v", s, err)
		}
	}
	for _, s := range []string{"", "/", "etc/x", "/etc/../x", "/etc//x", "/etc/x/", "/etc/x y", "/etc/x\n", "/etc/{x}", "/etc/x%y", "/etc/x'y"} {
		if AbsPath(s) == nil {
			t.Errorf("AbsPath accepted %q", s)
		}
	}
}

func TestZonesAreRefusedWithTheirOwnReason(t *testing.T) {
	for _, s := range []string{"fe80::1%lo", "fe80::1%eth0", "fe80::1%lo\n}"} {
		if _, err := IP(s); !IsZone(err) {
			t.Errorf("IP(%q) = %v, want the zone refusal", s, err)
		}
		if _, err := Host(s); !IsZone(err) {
			t.Errorf("Host(%q) = %v, want the zone refusal", s, err)
		}
		if _, err := IPOrPrefix(s); !IsZone(err) {
			t.Errorf("IPOrPrefix(%q) = %v, want the zone refusal", s, err)
		}
	}
}

func TestAccepted(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"203.0.113.5", "203.0.113.5"}, {"::ffff:203.0.113.5", "::ffff:203.0.113.5"}, {"2001:DB8::1", "2001:db8::1"},
	} {
		if a, err := IP(c.in); err != nil || a.String() != c.want {
			t.Errorf("IP(%q) = %v, %v; want %s", c.in, a, err, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"10.1.2.3/24", "10.1.2.0/24"}, {"10.1.2.3/32", "10.1.2.3"}, {"2001:db8::/48", "2001:db8::/48"}, {"203.0.113.7", "203.0.113.7"}, {"::ffff:203.0.113.7", "203.0.113.7"},
	} {
		if got, err := IPOrPrefix(c.in); err != nil || got != c.want {
			t.Errorf("IPOrPrefix(%q) = %q, %v; want %s", c.in, got, err, c.want)
		}
	}
	for _, s := range []string{"example.com", "router.Example.COM", "a-b.c1", strings.Repeat("a", 63) + ".com"} {
		if err := Hostname(s); err != nil {
			t.Errorf("Hostname(%q): %v", s, err)
		}
	}
	for _, s := range []string{"127.0.0.1:7380", "[::1]:7380", "localhost:1", "example.com:65535"} {
		if err := HostPort(s); err != nil {
			t.Errorf("HostPort(%q): %v", s, err)
		}
	}
	for _, s := range []string{"[::1]", "1.2.3.4:99999", "example.com:08", "::1:80", "example.com:"} {
		if HostPort(s) == nil {
			t.Errorf("HostPort accepted %q", s)
		}
	}
	for _, s := range []string{"http://example.com", "https://example.com:8443", "http://[2001:db8::1]:80", "http://[::1]", "http://127.0.0.1:7380"} {
		if err := BaseURL(s); err != nil {
			t.Errorf("BaseURL(%q): %v", s, err)
		}
	}
	for _, s := range []string{"ftp://x.com", "http://x.com/", "http://u@x.com", "http://x.com?a", "http://[1.2.3.4]", "http://::1", "http://"} {
		if BaseURL(s) == nil {
			t.Errorf("BaseURL accepted %q", s)
		}
	}
}

// FuzzValidators checks the package's promise: whatever a validator
// accepts is made only of characters that are plain in every generated
// format, and is no longer than the kind allows.
func FuzzValidators(f *testing.F) {
	for _, s := range hostile {
		f.Add(s)
	}
	for _, s := range []string{"example.com", "203.0.113.5", "2001:db8::/48", "127.0.0.1:7380", "https://[::1]:8443", "abc-DEF_0123456789abcdef"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		check := func(kind, out string) {
			if strings.IndexFunc(out, func(r rune) bool { return !strings.ContainsRune(plain, r) }) >= 0 || len(out) > 300 {
				t.Fatalf("%s accepted %q, which gives %q", kind, s, out)
			}
		}
		if Hostname(s) == nil {
			check("Hostname", s)
		}
		if Label(s) == nil {
			check("Label", s)
		}
		if a, err := IP(s); err == nil {
			check("IP", a.String())
		}
		if h, err := Host(s); err == nil {
			check("Host", h)
		}
		if p, err := IPOrPrefix(s); err == nil {
			check("IPOrPrefix", p)
		}
		if HostPort(s) == nil {
			check("HostPort", s)
		}
		if BaseURL(s) == nil {
			check("BaseURL", s)
		}
		if Token(s) == nil {
			check("Token", s)
		}
		if HTTPSURL(s) == nil {
			check("HTTPSURL", s)
		}
		if AbsPath(s) == nil {
			check("AbsPath", s)
		}
	})
}
