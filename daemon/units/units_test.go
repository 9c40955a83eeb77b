package units

import (
	"context"
	"errors"
	"testing"
)

func TestCanonical(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"revtunnel-server", "revtunnel-server.service"},
		{"caddy", "caddy.service"},
		{"fail2ban.service", "fail2ban.service"},
		{"sshd", ""},
		{"caddy.socket", ""},
		{"caddy.service.service", ""},
		{"", ""},
		{"../caddy", ""},
		{"Caddy", ""},
	} {
		got, err := Canonical(tc.in)
		if got != tc.want {
			t.Errorf("Canonical(%q) = %q, want %q", tc.in, got, tc.want)
		}
		var na *NotAllowedError
		if (tc.want == "") != errors.As(err, &na) {
			t.Errorf("Canonical(%q) error = %v", tc.in, err)
		}
	}
	_, err := Canonical("ssh")
	if want := `unit "ssh" is not managed by tunnelsvc (allowed: revtunnel-server, caddy, fail2ban)`; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}

func TestUnavailable(t *testing.T) {
	var m Manager = Unavailable{}
	ctx := context.Background()
	for _, call := range []func(string) error{
		func(n string) error { return m.Start(ctx, n) },
		func(n string) error { return m.Stop(ctx, n) },
		func(n string) error { return m.Restart(ctx, n) },
		func(n string) error { return m.Reload(ctx, n) },
		func(n string) error { return m.Enable(ctx, n) },
		func(n string) error { return m.Disable(ctx, n) },
		func(n string) error { _, err := m.State(ctx, n); return err },
	} {
		if err := call("caddy"); err == nil || err.Error() != "systemd is not available" {
			t.Fatalf("allowed unit: %v", err)
		}
		var na *NotAllowedError
		if err := call("nginx"); !errors.As(err, &na) {
			t.Fatalf("other unit: %v", err)
		}
	}
}
