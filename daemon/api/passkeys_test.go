package api

import (
	"context"
	"testing"
)

// TestPasskeyRefusals: passkeys are for router.<domain> only, and every
// refusal says why in words, answered as the API file describes (the
// ceremonies themselves run in Chromium's virtual authenticator:
// ui/test/passkeys.test.mjs).
func TestPasskeyRefusals(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newEnvOn(t, engine)
		cookie := e.setup()
		at := func(method, path, host, body string) resp {
			return e.do(req{method: method, path: path, body: body, cookie: cookie, header: map[string]string{"Host": host}})
		}
		wantError(t, at("POST", "/api/auth/passkeys/register/begin", "router.example.test", ""), 400,
			"passkeys need the dashboard's domain: install with a domain first, then open https://router.<domain>")
		if err := e.st.SetSetting(context.Background(), "domain", "example.test"); err != nil {
			t.Fatal(err)
		}
		wantError(t, at("POST", "/api/auth/passkeys/register/begin", "127.0.0.1:7380", ""), 400,
			"passkeys work only at https://router.example.test, the dashboard's own name: this page was opened as 127.0.0.1:7380. "+
				"Open https://router.example.test and try again (a passkey made at another name would not work there)")
		// At the right name: the options for the browser.
		d := data(t, at("POST", "/api/auth/passkeys/register/begin", "router.example.test", ""))
		opts, _ := d["options"].(map[string]any)
		pk, _ := opts["publicKey"].(map[string]any)
		rp, _ := pk["rp"].(map[string]any)
		if d["ceremony"] == "" || rp["id"] != "router.example.test" {
			t.Fatalf("begin: %v", d)
		}
		// A finish without an answer, or with a ceremony not handed out.
		wantError(t, at("POST", "/api/auth/passkeys/register/finish", "router.example.test", `{"ceremony":""}`), 400, "ceremony and credential are required")
		wantError(t, at("POST", "/api/auth/passkeys/register/finish", "router.example.test", `{"ceremony":"nope","credential":{"id":"x"}}`), 400,
			"the passkey prompt expired or was already answered: try again")
		// No passkey yet: a step-up or login prompt says to use a code.
		wantError(t, at("POST", "/api/auth/step-up/passkey", "router.example.test", ""), 400, "no passkey is registered: use a code")
		wantError(t, e.do(req{method: "POST", path: "/api/auth/login/passkey/begin", body: `{}`, header: map[string]string{"Host": "router.example.test"}}), 400,
			"pending_token is required: passwordless sign-in is off: log in with the password")
		// Passwordless sign-in needs a passkey, and says so; it stays off.
		wantError(t, at("PUT", "/api/auth/passkeys/passwordless", "router.example.test", `{"on":true}`), 400, "register a passkey first: passwordless sign-in uses one")
		wantError(t, at("PUT", "/api/auth/passkeys/passwordless", "router.example.test", `{}`), 400, "on is required (true or false)")
		if st := data(t, e.do(req{method: "GET", path: "/api/auth/status"})); st["passkey_login"] != false {
			t.Fatalf("status: %v", st)
		}
		wantError(t, e.do(req{method: "POST", path: "/api/auth/login/passkey/begin", body: `{"pending_token":"forged"}`, header: map[string]string{"Host": "router.example.test"}}), 401,
			"the login has expired or is not valid: log in with the password again")
		wantError(t, e.do(req{method: "POST", path: "/api/auth/login/passkey", body: `{"pending_token":"forged","ceremony":"x","credential":{}}`, header: map[string]string{"Host": "router.example.test"}}), 401,
			"the login has expired or is not valid: log in with the password again")
	})
}
