package totp

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

const password = "correct horse battery staple"

type env struct {
	gate *auth.Gate
	svc  *Service
	st   *store.Store
	now  time.Time
	logs *bytes.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sealer, err := seal.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{st: st, now: time.Unix(1_800_000_000, 0), logs: &bytes.Buffer{}}
	clock := func() time.Time { return e.now }
	log := slog.New(slog.NewTextHandler(e.logs, nil))
	rec := &audit.Recorder{Store: st, Log: log, Now: clock}
	e.gate = auth.NewGate(auth.ArgonSlots, auth.ArgonReserved, auth.ArgonQueue)
	a := &auth.Service{Store: st, Log: log, Audit: rec, DataDir: dir, Now: clock, Gate: e.gate,
		Sessions: &auth.Sessions{Store: st, Now: clock}, Limiter: auth.NewLimiter(clock)}
	if _, err := a.Setup(ctx, auth.Client{Local: true, Addr: netip.MustParseAddr("127.0.0.1")}, password, ""); err != nil {
		t.Fatal(err)
	}
	e.svc = New(Options{Store: st, Sealer: sealer, Auth: a, Audit: rec, Log: log, Now: clock})
	a.SecondFactor = e.svc
	return e
}

// enable enrolls and confirms one device and returns its secret and the
// backup codes.
func (e *env) enable(t *testing.T) (string, []string) {
	t.Helper()
	ctx := context.Background()
	en, err := e.svc.Enroll(ctx, "box.example:7380")
	if err != nil {
		t.Fatal(err)
	}
	code, _ := codeAt(en.Secret, step(e.now))
	codes, err := e.svc.Confirm(ctx, auth.Client{}, code, "phone")
	if err != nil || len(codes) != backupCount {
		t.Fatalf("confirm: %v, %d codes", err, len(codes))
	}
	return en.Secret, codes
}

func (e *env) kinds(t *testing.T) string {
	entries, err := e.st.ListAudit(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, en := range entries {
		ks = append(ks, en.Kind)
	}
	return strings.Join(ks, " ")
}

func TestStepUpPassword(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := auth.Client{Addr: netip.MustParseAddr("198.51.100.5")}
	if req, _ := e.svc.Requirement(ctx); req != "password" {
		t.Fatalf("requirement %q", req)
	}
	if err := e.svc.StepUp(ctx, c, Challenge{Code: "123456"}, "download key 1"); !errors.Is(err, ErrPasswordRequired) {
		t.Fatalf("no password: %v", err)
	}
	if err := e.svc.StepUp(ctx, c, Challenge{Password: "wrong"}, "download key 1"); !errors.Is(err, auth.ErrInvalidPassword) {
		t.Fatalf("wrong password: %v", err)
	}
	if !strings.Contains(e.kinds(t), KindStepUpFailed) || !strings.Contains(e.logs.String(), "auth failure from 198.51.100.5") {
		t.Fatalf("failure not audited: %s / %s", e.kinds(t), e.logs)
	}
	if err := e.svc.StepUp(ctx, c, Challenge{Password: password}, "download key 1"); err != nil {
		t.Fatalf("right password: %v", err)
	}
}

func TestStepUpTOTP(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := auth.Client{Addr: netip.MustParseAddr("198.51.100.6")}
	secret, backups := e.enable(t)
	if req, _ := e.svc.Requirement(ctx); req != "totp" {
		t.Fatalf("requirement %q", req)
	}
	if err := e.svc.StepUp(ctx, c, Challenge{Password: password}, "x"); !errors.Is(err, ErrCodeRequired) {
		t.Fatalf("password with 2FA on: %v", err)
	}
	// Backup codes are for logging in without the phone, not for step-up.
	if err := e.svc.StepUp(ctx, c, Challenge{Code: backups[0]}, "x"); !errors.Is(err, ErrInvalidCode) {
		t.Fatalf("backup code at step-up: %v", err)
	}
	e.now = e.now.Add(30 * time.Second)
	code, _ := codeAt(secret, step(e.now))
	if err := e.svc.StepUp(ctx, c, Challenge{Code: code}, "x"); err != nil {
		t.Fatalf("right code: %v", err)
	}
	if err := e.svc.StepUp(ctx, c, Challenge{Code: code}, "x"); !errors.Is(err, ErrCodeReused) {
		t.Fatalf("replayed code: %v", err)
	}
	if !strings.Contains(e.logs.String(), "auth failure from 198.51.100.6") {
		t.Fatalf("no failure line: %s", e.logs)
	}
	// Failures count in the shared limit (2 so far).
	for i := 2; i < auth.MaxFailures; i++ {
		e.svc.StepUp(ctx, c, Challenge{Code: "99999"}, "x")
	}
	e.now = e.now.Add(30 * time.Second)
	code, _ = codeAt(secret, step(e.now))
	var limited *auth.RateLimitedError
	if err := e.svc.StepUp(ctx, c, Challenge{Code: code}, "x"); !errors.As(err, &limited) {
		t.Fatalf("after %d failures: %v", auth.MaxFailures, err)
	}
	if n := strings.Count(e.kinds(t), KindStepUpFailed); n != auth.MaxFailures {
		t.Fatalf("STEP_UP_FAILED %d times, want %d", n, auth.MaxFailures)
	}
}

func TestBackupCodeHelpers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := auth.Client{Addr: netip.MustParseAddr("198.51.100.7")}
	plain, stored, err := e.svc.newBackupCodes(ctx, c)
	if err != nil || len(plain) != backupCount || len(stored) != backupCount {
		t.Fatal(err)
	}
	lookups := map[string]bool{}
	for i, p := range plain {
		if !regexp.MustCompile(`^[A-Z2-9]{3}-[A-Z2-9]{5}-[A-Z2-9]{5}$`).MatchString(p) {
			t.Fatalf("code %q is not LLL-SSSSS-SSSSS", p)
		}
		if stored[i].Lookup != p[:3] || lookups[p[:3]] {
			t.Fatalf("code %q: lookup %q, or repeated in the set", p, stored[i].Lookup)
		}
		lookups[p[:3]] = true
		if strings.Contains(stored[i].CodeHash, p) || strings.Contains(stored[i].CodeHash, normalize(p)[3:]) {
			t.Fatal("hash contains the code")
		}
		if ok, err := e.svc.backupMatches(ctx, c, stored[i].CodeHash, normalize(" "+strings.ToLower(p)+" ")); !ok || err != nil {
			t.Fatalf("%s does not match its hash: %v", p, err)
		}
	}
	if ok, _ := e.svc.backupMatches(ctx, c, stored[0].CodeHash, normalize(plain[1])); ok {
		t.Fatal("one code matches another's hash")
	}
}

// TestBackupGuessCostsOneHash: a backup-code guess is checked against the
// one code its prefix names, whatever the guess.
func TestBackupGuessCostsOneHash(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, codes := e.enable(t)
	c := auth.Client{Addr: netip.MustParseAddr("198.51.100.8")}
	for i, guess := range []string{codes[0][:4] + "AAAAA-AAAAA", codes[3][:4] + "BBBBB-CCCCC", "ZZZ-AAAAA-AAAAA"} {
		before := e.gate.Runs()
		if _, err := e.svc.find(ctx, c, guess, true); !errors.Is(err, ErrInvalidCode) {
			t.Fatalf("guess %q: %v", guess, err)
		}
		if n := e.gate.Runs() - before; n > 1 {
			t.Fatalf("guess %d cost %d hashes, want at most 1", i, n)
		}
	}
	before := e.gate.Runs()
	if m, err := e.svc.find(ctx, c, codes[5], true); err != nil || !m.isBackup() {
		t.Fatalf("right code: %v", err)
	}
	if n := e.gate.Runs() - before; n != 1 {
		t.Fatalf("right code cost %d hashes, want 1", n)
	}
}

// TestLegacyBackupCodes: codes issued before the prefix (XXXXX-XXXXX, no
// lookup) still log in, each once; new codes replace them.
func TestLegacyBackupCodes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.enable(t)
	c := auth.Client{Addr: netip.MustParseAddr("198.51.100.9")}
	legacy := []string{"ABCDE-FGHJK", "MNPQR-STUVW"}
	var rows []store.BackupCode
	for _, l := range legacy {
		h, err := e.svc.hashBackup(ctx, c, normalize(l))
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, store.BackupCode{CodeHash: h})
	}
	if err := e.st.ReplaceBackupCodes(ctx, rows, e.now); err != nil {
		t.Fatal(err)
	}
	pending, err := e.svc.BeginPending(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.CompleteLogin(ctx, c, pending, strings.ToLower(legacy[1])); err != nil {
		t.Fatalf("legacy backup code: %v", err)
	}
	pending, _ = e.svc.BeginPending(ctx, c)
	if _, err := e.svc.CompleteLogin(ctx, c, pending, legacy[1]); !errors.Is(err, ErrInvalidCode) {
		t.Fatalf("legacy code used twice: %v", err)
	}
	if n, _ := e.st.CountBackupCodes(ctx); n != 1 {
		t.Fatalf("%d codes left, want 1", n)
	}
}

func TestForceDisable(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.enable(t)
	n, err := e.svc.ForceDisable(ctx)
	if err != nil || n != 1 {
		t.Fatalf("ForceDisable = %d, %v", n, err)
	}
	st, _ := e.svc.Status(ctx)
	if st.Enabled || len(st.Devices) != 0 || st.BackupCodesRemaining != 0 {
		t.Fatalf("status %+v", st)
	}
	if !strings.HasPrefix(e.kinds(t), KindDisabled) {
		t.Fatalf("audit %s", e.kinds(t))
	}
}

// TestMain hashes cheaply: these tests are about what 2FA accepts and
// refuses, not what argon2id costs (the auth package's own tests keep
// the real cost).
func TestMain(m *testing.M) {
	auth.LowCostForTests()
	os.Exit(m.Run())
}
