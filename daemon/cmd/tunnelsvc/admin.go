package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
)

// setupCode prints the one-time setup code, creating it if the daemon has
// not started yet.
func setupCode(args []string, out io.Writer) error {
	cfg, err := config.Parse("setup-code", args)
	if err != nil {
		return err
	}
	a, err := app.Services(context.Background(), cfg, app.NewLogger("error", io.Discard))
	if err != nil {
		return err
	}
	defer a.Store.Close()
	if ok, err := a.Auth.Configured(context.Background()); err != nil {
		return err
	} else if ok {
		return errors.New("setup is already done; the setup code is no longer used (forgot the password? use reset-password)")
	}
	code, _, err := auth.LoadOrCreateSetupCode(cfg.DataDir)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, code)
	return nil
}

// resetPassword reads a new password (twice from a terminal, once from a
// pipe), applies the setup rules, and ends every session. It opens the
// database directly, so it works while the daemon runs.
func resetPassword(args []string, in *os.File, out io.Writer) error {
	cfg, err := config.Parse("reset-password", args)
	if err != nil {
		return err
	}
	if _, err := os.Stat(cfg.DataDir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no data directory at %s (pass --data-dir)", cfg.DataDir)
	}
	var pw string
	if term.IsTerminal(int(in.Fd())) {
		fmt.Fprint(out, "New password: ")
		b1, err := term.ReadPassword(int(in.Fd()))
		fmt.Fprintln(out)
		if err != nil {
			return err
		}
		fmt.Fprint(out, "Repeat it: ")
		b2, err := term.ReadPassword(int(in.Fd()))
		fmt.Fprintln(out)
		if err != nil {
			return err
		}
		if string(b1) != string(b2) {
			return errors.New("the two passwords differ; nothing changed")
		}
		pw = string(b1)
	} else {
		line, err := bufio.NewReader(io.LimitReader(in, auth.MaxPasswordBytes+2)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		pw = strings.TrimRight(line, "\r\n")
	}
	if err := auth.CheckPassword(pw); err != nil {
		return fmt.Errorf("%w; nothing changed", err)
	}
	a, err := app.Services(context.Background(), cfg, app.NewLogger("error", io.Discard))
	if err != nil {
		return err
	}
	defer a.Store.Close()
	ended, err := a.Auth.ResetPassword(context.Background(), pw)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "password changed; %s\n", ended)
	return nil
}

// disable2FA is root's recovery when every authenticator is lost: it removes
// all devices and backup codes (audit-logged), so the password alone logs
// in again. Like reset-password it works while the daemon runs.
func disable2FA(args []string, out io.Writer) error {
	cfg, err := config.Parse("disable-2fa", args)
	if err != nil {
		return err
	}
	if _, err := os.Stat(cfg.DataDir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no data directory at %s (pass --data-dir)", cfg.DataDir)
	}
	a, err := app.Services(context.Background(), cfg, app.NewLogger("error", io.Discard))
	if err != nil {
		return err
	}
	defer a.Store.Close()
	n, err := a.TOTP.ForceDisable(context.Background())
	if err != nil {
		return err
	}
	// Whoever holds the lost authenticator may hold a session too.
	ended, err := a.Auth.EndSessions(context.Background(), audit.SessionsEnded, "disable-2fa from the command line")
	if err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintf(out, "2FA was not enabled; nothing to remove (the password alone logs in); %d session(s) ended\n", ended)
		return nil
	}
	fmt.Fprintf(out, "2FA disabled: %d device(s) and every backup code removed; %d session(s) ended; log in with the password and enroll again\n", n, ended)
	return nil
}
