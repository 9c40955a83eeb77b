package api

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// wantRecentAuth checks the sudo-mode refusal, byte for byte.
func wantRecentAuth(t *testing.T, what string, r resp) {
	t.Helper()
	if r.Code != 403 || strings.TrimSpace(r.Body.String()) != `{"error":"recent authentication required"}` {
		t.Fatalf("%s from a stale session: %d %s, want 403 recent authentication required", what, r.Code, r.Body)
	}
}

// stepUp passes a step-up for session with body.
func (e *testEnv) stepUp(t *testing.T, session, body string) map[string]any {
	t.Helper()
	return data(t, e.do(req{method: "POST", path: "/api/auth/step-up", cookie: session, body: body}))
}

// TestSudoModeGuardsSensitiveChanges: creating a metrics token, changing
// the webhook and changing the firewall mode need a session that logged in
// or passed a step-up within the last 10 minutes. Each is allowed after a
// fresh login, refused 11 minutes later with nothing changed, and allowed
// again after a step-up; a new login renews it too.
func TestSudoModeGuardsSensitiveChanges(t *testing.T) {
	type state func(e *settingsEnv) string
	get := func(e *settingsEnv, path, field string) string {
		t.Helper()
		r := e.do(req{method: "GET", path: path, cookie: e.cookie})
		return fmt.Sprint(data(t, r)[field])
	}
	cases := []struct {
		name, method, path string
		// bodies of the three attempts: fresh, stale, after the step-up
		bodies [3]string
		state  state
	}{
		{"metrics token", "POST", "/api/monitoring/metrics-token", [3]string{"", "", ""},
			func(e *settingsEnv) string { return get(e, "/api/monitoring/metrics-token", "created_at") }},
		{"webhook", "PUT", "/api/monitoring/notifications",
			[3]string{`{"url":"https://hooks.example.com/a"}`, `{"url":"https://evil.example.net/b"}`, `{"url":"https://hooks.example.com/c"}`},
			func(e *settingsEnv) string { return get(e, "/api/monitoring/notifications", "url") }},
		{"firewall mode", "POST", "/api/local/firewall/configure",
			[3]string{`{"mode":"manual"}`, `{"mode":"none"}`, `{"mode":"none"}`},
			func(e *settingsEnv) string { return get(e, "/api/local/status", "firewall_mode") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newSettingsEnv(t)
			call := func(i int) resp {
				return e.do(req{method: c.method, path: c.path, body: c.bodies[i], cookie: e.cookie})
			}
			before := c.state(e)
			if r := call(0); r.Code != 200 {
				t.Fatalf("fresh login: %d %s", r.Code, r.Body)
			}
			fresh := c.state(e)
			if fresh == before {
				t.Fatalf("the fresh change changed nothing (%q)", fresh)
			}
			e.now = e.now.Add(11 * time.Minute)
			if st := data(t, e.do(req{method: "GET", path: "/api/auth/step-up", cookie: e.cookie})); st["recent"] != false || st["requires"] != "password" {
				t.Fatalf("step-up state 11 minutes after login: %v", st)
			}
			wantRecentAuth(t, c.name, call(1))
			if got := c.state(e); got != fresh {
				t.Fatalf("a refused change changed %q to %q", fresh, got)
			}
			// A wrong password is no step-up.
			wantError(t, e.do(req{method: "POST", path: "/api/auth/step-up", cookie: e.cookie, body: `{"password":"wrong password here"}`}), 401, "invalid password")
			wantRecentAuth(t, c.name+" after a failed step-up", call(1))
			st := e.stepUp(t, e.cookie, `{"password":"`+goodPassword+`"}`)
			if st["recent"] != true || st["recent_until"] != e.now.Add(10*time.Minute).UTC().Format(time.RFC3339) || st["window_seconds"] != 600.0 {
				t.Fatalf("step-up answer = %v", st)
			}
			if r := call(2); r.Code != 200 {
				t.Fatalf("after the step-up: %d %s", r.Code, r.Body)
			}
			e.waitOperation(t)
			if got := c.state(e); got == fresh {
				t.Fatalf("the change after the step-up changed nothing (%q)", got)
			}
			// 10 minutes after the step-up it is over again; a new login
			// renews it as well.
			e.now = e.now.Add(10 * time.Minute)
			wantRecentAuth(t, c.name+" 10 minutes after the step-up", call(1))
			login := e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`})
			e.cookie = sessionCookie(t, login).Value
			if r := call(0); r.Code != 200 {
				t.Fatalf("after a new login: %d %s", r.Code, r.Body)
			}
			e.waitOperation(t)
			kinds := e.auditKinds()
			if countKind(kinds, "STEP_UP_SUCCESS") != 1 || countKind(kinds, "STEP_UP_FAILED") != 1 {
				t.Fatalf("audit kinds = %v", kinds)
			}
		})
	}
}

// TestSudoModeGuardsAdditionalDevice: with 2FA on, enrolling and
// confirming another device need a recent authentication, and the step-up
// takes a device's code; the first device needs none.
func TestSudoModeGuardsAdditionalDevice(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newSettingsEnvOn(t, engine)
		// The first device: even a stale session may turn 2FA on.
		e.now = e.now.Add(11 * time.Minute)
		secret, _ := e.enableTOTP(e.cookie, "phone")
		devices := func() int { return len(e.status2FA(e.cookie)["devices"].([]any)) }
		// Stale: refused, nothing added.
		e.now = e.now.Add(time.Minute)
		wantRecentAuth(t, "enroll", e.do(req{method: "POST", path: "/api/auth/2fa/enroll", cookie: e.cookie}))
		wantRecentAuth(t, "confirm", e.do(req{method: "POST", path: "/api/auth/2fa/confirm", cookie: e.cookie,
			body: `{"code":"123456","name":"tablet"}`}))
		if n := devices(); n != 1 {
			t.Fatalf("%d devices after refused enrollments", n)
		}
		st := data(t, e.do(req{method: "GET", path: "/api/auth/step-up", cookie: e.cookie}))
		if st["requires"] != "totp" || st["recent"] != false {
			t.Fatalf("step-up state = %v", st)
		}
		// With 2FA on, the password is no step-up; a device's code is.
		wantError(t, e.do(req{method: "POST", path: "/api/auth/step-up", cookie: e.cookie, body: `{"password":"` + goodPassword + `"}`}), 400, "code is required")
		wantError(t, e.do(req{method: "POST", path: "/api/auth/step-up", cookie: e.cookie, body: `{"code":"000000"}`}), 401, "invalid code")
		e.stepUp(t, e.cookie, `{"code":"`+codeFor(t, secret, e.now)+`"}`)
		second, _ := e.enroll(e.cookie)
		data(t, e.do(req{method: "POST", path: "/api/auth/2fa/confirm", cookie: e.cookie,
			body: `{"code":"` + codeFor(t, second, e.now) + `","name":"tablet"}`}))
		if n := devices(); n != 2 {
			t.Fatalf("%d devices after the step-up", n)
		}
		// A fresh 2FA login allows it at once.
		e.now = e.now.Add(11 * time.Minute)
		wantRecentAuth(t, "enroll", e.do(req{method: "POST", path: "/api/auth/2fa/enroll", cookie: e.cookie}))
		pending := e.pendingLogin("")
		r := e.login2FA(pending, codeFor(t, second, e.now), "")
		data(t, r)
		data(t, e.do(req{method: "POST", path: "/api/auth/2fa/enroll", cookie: sessionCookie(t, r).Value}))
	})
}
