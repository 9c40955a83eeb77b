package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	pqtotp "github.com/pquerna/otp/totp"

	"github.com/tunnelsvc/tunnelsvc/daemon/apitokens"
	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
)

func TestDisable2FACommand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := openServices(t, dir)
	en, err := a.TOTP.Enroll(ctx, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	code, _ := pqtotp.GenerateCode(en.Secret, time.Now())
	if _, err := a.TOTP.Confirm(ctx, auth.Client{}, code, "lost phone"); err != nil {
		t.Fatal(err)
	}
	// Whoever holds the lost phone may hold a session: it ends too.
	if _, err := a.Auth.Sessions.Create(ctx, "192.0.2.9", "thief"); err != nil {
		t.Fatal(err)
	}
	a.Store.Close()

	var out bytes.Buffer
	if err := disable2FA([]string{"--data-dir", dir}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "2FA disabled: 1 device(s) and every backup code removed; 1 session(s) ended") {
		t.Fatalf("output %q", out.String())
	}
	a = openServices(t, dir)
	defer a.Store.Close()
	if on, _ := a.TOTP.Enabled(ctx); on {
		t.Fatal("2FA still enabled")
	}
	entries, _ := a.Audit.List(ctx, 10)
	if len(entries) < 2 || entries[0].Kind != "SESSIONS_ENDED" || entries[0].Detail != "disable-2fa from the command line; 1 session(s) ended" ||
		entries[1].Kind != "TOTP_DISABLED" || !strings.Contains(entries[1].Detail, "disable-2fa") {
		t.Fatalf("audit %+v", entries)
	}
	out.Reset()
	if err := disable2FA([]string{"--data-dir", dir}, &out); err != nil || !strings.Contains(out.String(), "not enabled") {
		t.Fatalf("second run: %v %q", err, out.String())
	}
	if err := disable2FA([]string{"--data-dir", dir + "/missing"}, &out); err == nil {
		t.Fatal("missing data dir accepted")
	}
}

// TestResetPasswordEndsEverything: root's reset-password ends every
// session and revokes every API token (a stolen session may have left one
// behind), says how many of each, and so does the audit log.
func TestResetPasswordEndsEverything(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := openServices(t, dir)
	if _, err := a.Auth.Setup(ctx, auth.Client{Local: true}, "the first long passphrase", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Auth.Sessions.Create(ctx, "192.0.2.9", "thief"); err != nil {
		t.Fatal(err)
	}
	tokens := &apitokens.Service{Store: a.Store}
	left, err := tokens.Create(ctx, "left-behind", apitokens.ScopeWrite, 365)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.Create(ctx, "ci", apitokens.ScopeRead, 0); err != nil {
		t.Fatal(err)
	}
	a.Store.Close()

	r, w, _ := os.Pipe()
	w.WriteString("a brand new passphrase here\n")
	w.Close()
	var out bytes.Buffer
	if err := resetPassword([]string{"--data-dir", dir}, r, &out); err != nil {
		t.Fatal(err)
	}
	// The setup's session and the thief's.
	if got := out.String(); got != "password changed; 2 session(s) ended, 2 API token(s) revoked\n" {
		t.Fatalf("output %q", got)
	}
	a = openServices(t, dir)
	defer a.Store.Close()
	if _, err := (&apitokens.Service{Store: a.Store}).Check(ctx, left.Secret, "192.0.2.9"); err != apitokens.ErrInvalid {
		t.Fatalf("the token left behind after the reset: %v", err)
	}
	entries, _ := a.Audit.List(ctx, 1)
	if len(entries) != 1 || entries[0].Kind != "PASSWORD_RESET" ||
		entries[0].Detail != "reset from the command line; password sign-in on; 2 session(s) ended, 2 API token(s) revoked" {
		t.Fatalf("audit %+v", entries)
	}
}

// openServices opens the daemon's services on the data directory dir, as
// the admin commands do; the caller closes the store.
func openServices(t *testing.T, dir string) *app.App {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = dir
	a, err := app.Services(context.Background(), &cfg, app.NewLogger("error", io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	return a
}
