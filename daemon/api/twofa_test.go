package api

import (
	"bytes"
	"context"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/makiuchi-d/gozxing"
	"github.com/makiuchi-d/gozxing/qrcode"
	"github.com/pquerna/otp"
	pqtotp "github.com/pquerna/otp/totp"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// codeFor computes what an authenticator app shows for secret at t.
func codeFor(t testing.TB, secret string, at time.Time) string {
	t.Helper()
	c, err := pqtotp.GenerateCodeCustom(secret, at, pqtotp.ValidateOpts{Period: 30, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func data(t testing.TB, r resp) map[string]any {
	t.Helper()
	if r.Code != 200 {
		t.Fatalf("status %d, body %s", r.Code, r.Body)
	}
	d, ok := r.json(t)["data"].(map[string]any)
	if !ok {
		t.Fatalf("no data object: %s", r.Body)
	}
	return d
}

// enroll starts an enrollment and returns its secret and QR data URL.
func (e *testEnv) enroll(session string) (secret, qr string) {
	e.t.Helper()
	d := data(e.t, e.do(req{method: "POST", path: "/api/auth/2fa/enroll", cookie: session}))
	return d["secret"].(string), d["qr_data_url"].(string)
}

// enableTOTP enrolls and confirms a first device; it returns its secret and
// the backup codes.
func (e *testEnv) enableTOTP(session, name string) (string, []string) {
	e.t.Helper()
	secret, _ := e.enroll(session)
	d := data(e.t, e.do(req{method: "POST", path: "/api/auth/2fa/confirm", cookie: session,
		body: `{"code":"` + codeFor(e.t, secret, e.now) + `","name":"` + name + `"}`}))
	var codes []string
	for _, c := range d["backup_codes"].([]any) {
		codes = append(codes, c.(string))
	}
	return secret, codes
}

func (e *testEnv) pendingLogin(peer string) string {
	e.t.Helper()
	r := e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`, peer: peer})
	if sessionCookie(e.t, r) != nil {
		e.t.Fatalf("login with 2FA on set a cookie: %v", r.Header()["Set-Cookie"])
	}
	d := data(e.t, r)
	if d["needs_2fa"] != true || d["pending_token"] == "" {
		e.t.Fatalf("login with 2FA on: %s", r.Body)
	}
	return d["pending_token"].(string)
}

func (e *testEnv) login2FA(pending, code, peer string) resp {
	b, _ := json.Marshal(map[string]string{"pending_token": pending, "code": code})
	return e.do(req{method: "POST", path: "/api/auth/login/2fa", body: string(b), peer: peer})
}

func (e *testEnv) status2FA(session string) map[string]any {
	e.t.Helper()
	return data(e.t, e.do(req{method: "GET", path: "/api/auth/2fa/status", cookie: session}))
}

func (e *testEnv) auditKinds() []string {
	e.t.Helper()
	entries, err := e.st.ListAudit(context.Background(), 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	var kinds []string
	for i := len(entries) - 1; i >= 0; i-- {
		kinds = append(kinds, entries[i].Kind)
	}
	return kinds
}

func countKind(kinds []string, kind string) int {
	n := 0
	for _, k := range kinds {
		if k == kind {
			n++
		}
	}
	return n
}

var backupShape = regexp.MustCompile(`^[A-Z2-9]{3}-[A-Z2-9]{5}-[A-Z2-9]{5}$`)

// TestTwoFactorLifecycle walks every §3 2FA transition over HTTP with codes
// computed from the enrolled secrets.
func TestTwoFactorLifecycle(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newEnvOn(t, engine)
		session := e.setup()
		if st := e.status2FA(session); st["enabled"] != false || len(st["devices"].([]any)) != 0 || st["backup_codes_remaining"] != 0.0 {
			t.Fatalf("fresh status %v", st)
		}
		if r := data(t, e.do(req{method: "GET", path: "/api/local/ssh-keys/challenge-info", cookie: session})); r["requires"] != "password" {
			t.Fatalf("challenge-info with 2FA off: %v", r)
		}

		// disabled -> enabled: the first device returns 10 backup codes once.
		secret, _ := e.enroll(session)
		wantError(t, e.do(req{method: "POST", path: "/api/auth/2fa/confirm", cookie: session, body: `{"name":"phone"}`}), 400, "code is required")
		wantError(t, e.do(req{method: "POST", path: "/api/auth/2fa/confirm", cookie: session, body: `{"code":`}), 400, "invalid request body")
		wrong := "000000"
		if codeFor(t, secret, e.now) == wrong {
			wrong = "111111"
		}
		wantError(t, e.do(req{method: "POST", path: "/api/auth/2fa/confirm", cookie: session, body: `{"code":"` + wrong + `"}`}), 400, "invalid code")
		if on, _ := e.totp.Enabled(context.Background()); on {
			t.Fatal("a wrong confirm code enabled 2FA")
		}
		confirmCode := codeFor(t, secret, e.now)
		d := data(t, e.do(req{method: "POST", path: "/api/auth/2fa/confirm", cookie: session, body: `{"code":"` + confirmCode + `","name":"phone"}`}))
		codes, _ := d["backup_codes"].([]any)
		if len(codes) != 10 || d["message"] == "" {
			t.Fatalf("first confirm: %v", d)
		}
		seen := map[string]bool{}
		for _, c := range codes {
			if !backupShape.MatchString(c.(string)) || seen[c.(string)] {
				t.Fatalf("backup code %q: not LLL-SSSSS-SSSSS or repeated", c)
			}
			seen[c.(string)] = true
		}
		st := e.status2FA(session)
		devs := st["devices"].([]any)
		if st["enabled"] != true || len(devs) != 1 || st["backup_codes_remaining"] != 10.0 {
			t.Fatalf("status after enable: %v", st)
		}
		phone := devs[0].(map[string]any)
		if phone["name"] != "phone" || phone["id"] == "" || phone["created_at"] == nil {
			t.Fatalf("device %v", phone)
		}
		if _, ok := phone["last_used_at"]; !ok {
			t.Fatalf("device has no last_used_at field: %v", phone)
		}
		if r := e.do(req{method: "GET", path: "/api/auth/status"}); !strings.Contains(r.Body.String(), `"totp_enabled":true`) {
			t.Fatalf("auth status: %s", r.Body)
		}
		if r := data(t, e.do(req{method: "GET", path: "/api/local/ssh-keys/challenge-info", cookie: session})); r["requires"] != "totp" {
			t.Fatalf("challenge-info with 2FA on: %v", r)
		}

		// enabled -> enabled: an additional device returns no backup codes.
		e.now = e.now.Add(30 * time.Second)
		secret2, _ := e.enroll(session)
		d = data(t, e.do(req{method: "POST", path: "/api/auth/2fa/confirm", cookie: session, body: `{"code":"` + codeFor(t, secret2, e.now) + `","name":"tablet"}`}))
		if _, has := d["backup_codes"]; has || d["message"] != "device added" {
			t.Fatalf("second confirm: %v", d)
		}
		devs = e.status2FA(session)["devices"].([]any)
		if len(devs) != 2 {
			t.Fatalf("devices %v", devs)
		}
		tablet := devs[1].(map[string]any)

		// Login: no session -> pending 2FA -> session active.
		pending := e.pendingLogin("")
		wantError(t, e.login2FA(pending, "", ""), 400, "pending_token and code are required")
		wantError(t, e.login2FA("", "123456", ""), 400, "pending_token and code are required")
		wantError(t, e.do(req{method: "POST", path: "/api/auth/login/2fa", body: `[]`}), 400, "invalid request body")
		wantError(t, e.login2FA(pending, wrong, ""), 401, "invalid code")
		// The confirm code of the tablet was spent at confirm: a replay.
		wantError(t, e.login2FA(pending, codeFor(t, secret2, e.now), ""), 401, "this code was already used; wait for the next one")
		wantError(t, e.login2FA("not-a-token", codeFor(t, secret, e.now), ""), 401, "the login has expired or is not valid: log in with the password again")
		// The pending token survived the wrong codes.
		phoneCode := codeFor(t, secret, e.now)
		r := e.login2FA(pending, phoneCode, "")
		c := sessionCookie(t, r)
		if r.Code != 200 || c == nil || c.MaxAge != 86400 || !c.HttpOnly {
			t.Fatalf("2FA login: %d %s cookie %+v", r.Code, r.Body, c)
		}
		if r := e.do(req{method: "GET", path: "/api/auth/2fa/status", cookie: c.Value}); r.Code != 200 {
			t.Fatalf("new session does not work: %d", r.Code)
		}
		// Consumed by success, and the code is not accepted twice.
		wantError(t, e.login2FA(pending, codeFor(t, secret2, e.now.Add(30*time.Second)), ""), 401, "the login has expired or is not valid: log in with the password again")
		wantError(t, e.login2FA(e.pendingLogin(""), phoneCode, ""), 401, "this code was already used; wait for the next one")
		// ±1 step: the phone's next code (clock skew) is accepted, then the
		// code of the current step, which is older, is a replay.
		pending = e.pendingLogin("")
		if r := e.login2FA(pending, codeFor(t, secret, e.now.Add(30*time.Second)), ""); r.Code != 200 {
			t.Fatalf("next-step code: %d %s", r.Code, r.Body)
		}
		wantError(t, e.login2FA(e.pendingLogin(""), codeFor(t, secret, e.now.Add(2*30*time.Second)), ""), 401, "invalid code")

		// Backup code: case and dash do not matter, single use.
		bc := codes[0].(string)
		sloppy := strings.ToLower(strings.ReplaceAll(bc, "-", ""))
		if r := e.login2FA(e.pendingLogin(""), sloppy, ""); r.Code != 200 {
			t.Fatalf("backup code %q: %d %s", sloppy, r.Code, r.Body)
		}
		wantError(t, e.login2FA(e.pendingLogin(""), bc, ""), 401, "invalid code")
		if got := e.status2FA(session)["backup_codes_remaining"]; got != 9.0 {
			t.Fatalf("backup codes remaining = %v, want 9", got)
		}

		// Remove a device: validation, unknown id, own code refused.
		e.now = e.now.Add(5 * 30 * time.Second)
		del := func(id, body string) resp {
			return e.do(req{method: "DELETE", path: "/api/auth/2fa/devices/" + id, cookie: session, body: body})
		}
		wantError(t, del("", `{"code":"123456"}`), 400, "device id is required")
		wantError(t, del("%20", `{"code":"123456"}`), 400, "device id is required")
		wantError(t, e.do(req{method: "DELETE", path: "/api/auth/2fa/devices", cookie: session, body: `{"code":"123456"}`}), 400, "device id is required")
		wantError(t, del(tablet["id"].(string), `{}`), 400, "code is required")
		wantError(t, del("nope", `{"code":"`+codeFor(t, secret, e.now)+`"}`), 404, "device not found")
		wantError(t, del(tablet["id"].(string), `{"code":"`+codeFor(t, secret2, e.now)+`"}`), 400,
			"this code comes from the device being removed: use a code from another device or a backup code")
		wantError(t, del(tablet["id"].(string), `{"code":"`+wrong+`"}`), 400, "invalid code")
		if n := len(e.status2FA(session)["devices"].([]any)); n != 2 {
			t.Fatalf("a refused removal removed something: %d devices", n)
		}
		if r := del(tablet["id"].(string), `{"code":"`+codeFor(t, secret, e.now)+`"}`); r.Code != 200 {
			t.Fatalf("remove with the other device's code: %d %s", r.Code, r.Body)
		}
		devs = e.status2FA(session)["devices"].([]any)
		if len(devs) != 1 || devs[0].(map[string]any)["name"] != "phone" || devs[0].(map[string]any)["last_used_at"] == nil {
			t.Fatalf("devices after removal: %v", devs)
		}

		// Regenerate: new set once, old set dead.
		wantError(t, e.do(req{method: "POST", path: "/api/auth/2fa/backup-codes/regenerate", cookie: session, body: `{}`}), 400, "code is required")
		e.now = e.now.Add(30 * time.Second)
		d = data(t, e.do(req{method: "POST", path: "/api/auth/2fa/backup-codes/regenerate", cookie: session, body: `{"code":"` + codeFor(t, secret, e.now) + `"}`}))
		newCodes := d["backup_codes"].([]any)
		if len(newCodes) != 10 || d["message"] == "" {
			t.Fatalf("regenerate: %v", d)
		}
		wantError(t, e.login2FA(e.pendingLogin(""), codes[1].(string), ""), 401, "invalid code")
		if e.status2FA(session)["backup_codes_remaining"] != 10.0 {
			t.Fatal("regenerated set is not 10 codes")
		}

		// Disable with a backup code: all devices and codes removed.
		wantError(t, e.do(req{method: "POST", path: "/api/auth/2fa/disable", cookie: session, body: `{}`}), 400, "code is required")
		wantError(t, e.do(req{method: "POST", path: "/api/auth/2fa/disable", cookie: session, body: `{"code":"` + wrong + `"}`}), 400, "invalid code")
		if r := e.do(req{method: "POST", path: "/api/auth/2fa/disable", cookie: session, body: `{"code":"` + newCodes[3].(string) + `"}`}); r.Code != 200 {
			t.Fatalf("disable: %d %s", r.Code, r.Body)
		}
		if st := e.status2FA(session); st["enabled"] != false || len(st["devices"].([]any)) != 0 || st["backup_codes_remaining"] != 0.0 {
			t.Fatalf("status after disable: %v", st)
		}
		wantError(t, e.do(req{method: "POST", path: "/api/auth/2fa/disable", cookie: session, body: `{"code":"123456"}`}), 400, "2FA is not enabled")
		if r := e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`}); sessionCookie(t, r) == nil {
			t.Fatalf("password-only login after disable: %s", r.Body)
		}

		kinds := e.auditKinds()
		for _, k := range []string{"LOGIN_2FA_PENDING", "LOGIN_2FA_SUCCESS", "LOGIN_2FA_FAILED", "BACKUP_CODE_USED", "TOTP_ENABLED",
			"TOTP_DISABLED", "TOTP_DEVICE_ADDED", "TOTP_DEVICE_REMOVED", "BACKUP_CODES_REGENERATED", "STEP_UP_FAILED"} {
			if countKind(kinds, k) == 0 {
				t.Errorf("no %s in the audit log %v", k, kinds)
			}
		}
		if n := countKind(kinds, "TOTP_DEVICE_ADDED"); n != 2 {
			t.Errorf("TOTP_DEVICE_ADDED %d times, want 2", n)
		}
	})
}

func TestTwoFactorRoutesNeedSession(t *testing.T) {
	e := newEnv(t)
	e.setup()
	for _, rt := range []struct{ method, path string }{
		{"GET", "/api/auth/2fa/status"}, {"POST", "/api/auth/2fa/enroll"}, {"POST", "/api/auth/2fa/confirm"},
		{"POST", "/api/auth/2fa/disable"}, {"DELETE", "/api/auth/2fa/devices/x"}, {"DELETE", "/api/auth/2fa/devices/"},
		{"POST", "/api/auth/2fa/backup-codes/regenerate"}, {"GET", "/api/local/ssh-keys/challenge-info"},
	} {
		wantError(t, e.do(req{method: rt.method, path: rt.path, body: `{"code":"123456"}`}), 401, "authentication required")
	}
}

func TestPendingTokenExpires(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newEnvOn(t, engine)
		session := e.setup()
		secret, _ := e.enableTOTP(session, "phone")
		pending := e.pendingLogin("")
		e.now = e.now.Add(5*time.Minute + time.Second)
		wantError(t, e.login2FA(pending, codeFor(t, secret, e.now), ""), 401, "the login has expired or is not valid: log in with the password again")
		// A fresh login still works with the same (unspent) code.
		if r := e.login2FA(e.pendingLogin(""), codeFor(t, secret, e.now), ""); r.Code != 200 {
			t.Fatalf("fresh pending: %d %s", r.Code, r.Body)
		}
		// Just inside the lifetime works.
		pending = e.pendingLogin("")
		e.now = e.now.Add(5*time.Minute - time.Second)
		if r := e.login2FA(pending, codeFor(t, secret, e.now), ""); r.Code != 200 {
			t.Fatalf("pending at 4:59: %d %s", r.Code, r.Body)
		}
	})
}

func TestEnrollmentExpiresAndIsReplaced(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newEnvOn(t, engine)
		session := e.setup()
		first, _ := e.enroll(session)
		second, _ := e.enroll(session)
		if first == second {
			t.Fatal("two enrollments share a secret")
		}
		wantError(t, e.do(req{method: "POST", path: "/api/auth/2fa/confirm", cookie: session, body: `{"code":"` + codeFor(t, first, e.now) + `"}`}), 400, "invalid code")
		e.now = e.now.Add(10*time.Minute + time.Second)
		wantError(t, e.do(req{method: "POST", path: "/api/auth/2fa/confirm", cookie: session, body: `{"code":"` + codeFor(t, second, e.now) + `"}`}), 400,
			"no pending enrollment (it expires after 10 minutes): start again with enroll")
		secret, _ := e.enroll(session)
		wantError(t, e.do(req{method: "POST", path: "/api/auth/2fa/confirm", cookie: session,
			body: `{"code":"` + codeFor(t, secret, e.now) + `","name":"` + strings.Repeat("n", 65) + `"}`}), 400, "name must be at most 64 characters")
		d := data(t, e.do(req{method: "POST", path: "/api/auth/2fa/confirm", cookie: session, body: `{"code":"` + codeFor(t, secret, e.now) + `"}`}))
		if len(d["backup_codes"].([]any)) != 10 {
			t.Fatalf("confirm: %v", d)
		}
		if name := e.status2FA(session)["devices"].([]any)[0].(map[string]any)["name"]; name != "Authenticator" {
			t.Fatalf("default name %v", name)
		}
		// Confirming twice is not possible: the enrollment is gone. (2FA is on
		// now and the session logged in over 10 minutes ago: adding a device
		// needs a step-up first.)
		wantRecentAuth(t, "a second confirm", e.do(req{method: "POST", path: "/api/auth/2fa/confirm", cookie: session, body: `{"code":"` + codeFor(t, secret, e.now) + `"}`}))
		e.now = e.now.Add(30 * time.Second)
		e.stepUp(t, session, `{"code":"`+codeFor(t, secret, e.now)+`"}`)
		wantError(t, e.do(req{method: "POST", path: "/api/auth/2fa/confirm", cookie: session, body: `{"code":"` + codeFor(t, secret, e.now) + `"}`}), 400,
			"no pending enrollment (it expires after 10 minutes): start again with enroll")
	})
}

func TestTwoFactorRateLimit(t *testing.T) {
	e := newEnv(t)
	session := e.setup()
	secret, _ := e.enableTOTP(session, "phone")
	peer := "198.51.100.30:1"
	wrong := "000000"
	if codeFor(t, secret, e.now) == wrong {
		wrong = "111111"
	}
	// Two pending logins take the address's 10 failures (5 each).
	var pending string
	for range 2 {
		pending = e.pendingLogin(peer)
		for range 5 {
			wantError(t, e.login2FA(pending, wrong, peer), 401, "invalid code")
		}
	}
	r := e.login2FA(pending, codeFor(t, secret, e.now), peer)
	wantError(t, r, 429, "")
	if r.Header().Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	// The same limit covers the password.
	wantError(t, e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`, peer: peer}), 429, "")
	// After the window the spent pending token is refused as not valid.
	e.now = e.now.Add(auth.FailureWindow)
	wantError(t, e.login2FA(pending, codeFor(t, secret, e.now), peer), 401, "the login has expired or is not valid: log in with the password again")
	if n := countKind(e.auditKinds(), "LOGIN_2FA_FAILED"); n != auth.MaxFailures+1 {
		t.Fatalf("LOGIN_2FA_FAILED audited %d times, want %d", n, auth.MaxFailures+1)
	}
}

// TestTOTPSecretSealed: neither the devices row nor the database files hold
// the secret in the clear.
func TestTOTPSecretSealed(t *testing.T) {
	e := newEnv(t)
	session := e.setup()
	secret, _ := e.enableTOTP(session, "phone")
	var sealed string
	if err := e.st.DB().QueryRow("SELECT secret_sealed FROM totp_devices").Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sealed, "v1:") || strings.Contains(sealed, secret) {
		t.Fatalf("secret_sealed %q is not sealed", sealed)
	}
	raw, err := base32Decode(secret)
	if err != nil {
		t.Fatal(err)
	}
	// Every file of the database (main file, WAL) on disk.
	files, _ := filepath.Glob(filepath.Join(e.db.dir, store.DBFile+"*"))
	if len(files) == 0 {
		t.Fatal("no database files found")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secret)) || bytes.Contains(b, raw) {
			t.Fatalf("%s contains the TOTP secret", f)
		}
	}
}

// TestEnrollQR decodes the QR image and finds the otpauth URI of the secret.
func TestEnrollQR(t *testing.T) {
	e := newEnv(t)
	session := e.setup()
	secret, qr := e.enroll(session)
	checkQR(t, qr, secret, "127.0.0.1")
	// A configured domain is the account name.
	if err := e.st.SetSetting(context.Background(), "domain", "tunnels.example.org"); err != nil {
		t.Fatal(err)
	}
	secret, qr = e.enroll(session)
	checkQR(t, qr, secret, "tunnels.example.org")
}

func checkQR(t testing.TB, dataURL, secret, account string) {
	t.Helper()
	const prefix = "data:image/png;base64,"
	if !strings.HasPrefix(dataURL, prefix) {
		t.Fatalf("qr_data_url starts %q", dataURL[:min(40, len(dataURL))])
	}
	pngBytes, err := base64.StdEncoding.DecodeString(dataURL[len(prefix):])
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(pngBytes))
	if err != nil {
		t.Fatal(err)
	}
	bmp, err := gozxing.NewBinaryBitmapFromImage(img)
	if err != nil {
		t.Fatal(err)
	}
	res, err := qrcode.NewQRCodeReader().Decode(bmp, nil)
	if err != nil {
		t.Fatalf("QR does not decode: %v", err)
	}
	u, err := url.Parse(res.GetText())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if u.Scheme != "otpauth" || u.Host != "totp" || u.Path != "/tunnelsvc:"+account ||
		q.Get("secret") != secret || q.Get("issuer") != "tunnelsvc" ||
		q.Get("period") != "30" || q.Get("digits") != "6" || q.Get("algorithm") != "SHA1" {
		t.Fatalf("QR holds %q", res.GetText())
	}
}

func base32Decode(s string) ([]byte, error) {
	return base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(s)
}

// TestAuditNamesKeysAndDevices: the audit log names SSH keys and 2FA
// devices by their names (with the id beside), in step-up failures and in
// 2FA logins too, as the dashboard's audit page shows it.
func TestAuditNamesKeysAndDevices(t *testing.T) {
	e := newEnv(t)
	session := e.setup()
	key := data(t, e.do(req{method: "POST", path: "/api/local/ssh-keys/generate", cookie: session, body: `{"name":"laptop key"}`}))
	id := key["id"].(string)
	secret, _ := e.enableTOTP(session, "phone")
	wantError(t, e.do(req{method: "POST", path: "/api/local/ssh-keys/" + id + "/download", cookie: session, body: `{"code":"000000"}`}), 401, "invalid code")
	pending := e.pendingLogin("")
	if r := e.login2FA(pending, codeFor(t, secret, e.now.Add(30*time.Second)), ""); r.Code != 200 {
		t.Fatalf("2FA login: %d %s", r.Code, r.Body)
	}
	entries, err := e.st.ListAudit(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"STEP_UP_FAILED":    `download SSH key "laptop key" (` + id + `)`,
		"LOGIN_2FA_SUCCESS": `device "phone" (`,
		"TOTP_DEVICE_ADDED": `device "phone" (`,
	}
	for kind, frag := range want {
		found := false
		for _, en := range entries {
			if en.Kind == kind && strings.Contains(en.Detail, frag) {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s entry naming %s", kind, frag)
		}
	}
	if t.Failed() {
		for _, en := range entries {
			t.Logf("%s %q", en.Kind, en.Detail)
		}
	}
}
