package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	pqtotp "github.com/pquerna/otp/totp"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
)

func TestDisable2FACommand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.DataDir = dir
	a, err := app.Services(ctx, &cfg, newLogger("error", io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	en, err := a.TOTP.Enroll(ctx, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	code, _ := pqtotp.GenerateCode(en.Secret, time.Now())
	if _, err := a.TOTP.Confirm(ctx, auth.Client{}, code, "lost phone"); err != nil {
		t.Fatal(err)
	}
	a.Store.Close()

	var out bytes.Buffer
	if err := disable2FA([]string{"--data-dir", dir}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "2FA disabled: 1 device(s)") {
		t.Fatalf("output %q", out.String())
	}
	a, err = app.Services(ctx, &cfg, newLogger("error", io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Store.Close()
	if on, _ := a.TOTP.Enabled(ctx); on {
		t.Fatal("2FA still enabled")
	}
	entries, _ := a.Audit.List(ctx, 10)
	if len(entries) == 0 || entries[0].Kind != "TOTP_DISABLED" || !strings.Contains(entries[0].Detail, "disable-2fa") {
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
