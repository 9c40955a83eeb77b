package api

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// softKey is a software authenticator: one P-256 passkey, as a platform
// authenticator makes it (no attestation, user present and verified).
type softKey struct {
	t      *testing.T
	rpID   string
	origin string
	key    *ecdsa.PrivateKey
	id     []byte
	user   []byte
	count  uint32
}

func newSoftKey(t *testing.T, rpID, origin string) *softKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id := make([]byte, 16)
	rand.Read(id)
	return &softKey{t: t, rpID: rpID, origin: origin, key: k, id: id}
}

var b64 = base64.RawURLEncoding

func (k *softKey) clientData(typ, challenge string) []byte {
	b, _ := json.Marshal(map[string]any{"type": typ, "challenge": challenge, "origin": k.origin, "crossOrigin": false})
	return b
}

func (k *softKey) authData(flags byte, attested []byte) []byte {
	h := sha256.Sum256([]byte(k.rpID))
	out := append(h[:], flags)
	out = binary.BigEndian.AppendUint32(out, k.count)
	return append(out, attested...)
}

// create answers navigator.credentials.create's options (the daemon's
// begin answer) as the browser's PublicKeyCredential.toJSON().
func (k *softKey) create(options map[string]any) json.RawMessage {
	pk := options["publicKey"].(map[string]any)
	user := pk["user"].(map[string]any)
	k.user, _ = b64.DecodeString(user["id"].(string))
	x, y := k.key.X.FillBytes(make([]byte, 32)), k.key.Y.FillBytes(make([]byte, 32))
	cose, err := cbor.Marshal(map[int]any{1: 2, 3: -7, -1: 1, -2: x, -3: y})
	if err != nil {
		k.t.Fatal(err)
	}
	att := make([]byte, 16) // AAGUID
	att = binary.BigEndian.AppendUint16(att, uint16(len(k.id)))
	att = append(append(att, k.id...), cose...)
	obj, err := cbor.Marshal(map[string]any{"fmt": "none", "attStmt": map[string]any{}, "authData": k.authData(0x45, att)})
	if err != nil {
		k.t.Fatal(err)
	}
	cd := k.clientData("webauthn.create", pk["challenge"].(string))
	b, _ := json.Marshal(map[string]any{"id": b64.EncodeToString(k.id), "rawId": b64.EncodeToString(k.id), "type": "public-key",
		"response": map[string]any{"clientDataJSON": b64.EncodeToString(cd), "attestationObject": b64.EncodeToString(obj)}})
	return b
}

// get answers navigator.credentials.get's options.
func (k *softKey) get(options map[string]any) json.RawMessage {
	pk := options["publicKey"].(map[string]any)
	k.count++
	ad := k.authData(0x05, nil)
	cd := k.clientData("webauthn.get", pk["challenge"].(string))
	h := sha256.Sum256(cd)
	digest := sha256.Sum256(append(append([]byte{}, ad...), h[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, k.key, digest[:])
	if err != nil {
		k.t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"id": b64.EncodeToString(k.id), "rawId": b64.EncodeToString(k.id), "type": "public-key",
		"response": map[string]any{"clientDataJSON": b64.EncodeToString(cd), "authenticatorData": b64.EncodeToString(ad),
			"signature": b64.EncodeToString(sig), "userHandle": b64.EncodeToString(k.user)}})
	return b
}

// TestPasskeyFlowsThroughTheAPI runs every passkey ceremony against the
// API with a software authenticator, so that each answer is held against
// the API file (as Chromium's virtual authenticator does them in the
// browser test): register (the first device brings backup codes), the
// login's second step, a step-up, and passwordless sign-in; an answer
// given twice is refused.
func TestPasskeyFlowsThroughTheAPI(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newEnvOn(t, engine)
		cookie := e.setup()
		if err := e.st.SetSetting(context.Background(), "domain", "example.test"); err != nil {
			t.Fatal(err)
		}
		const host = "router.example.test"
		k := newSoftKey(t, host, "http://"+host)
		at := func(method, path, body, cookie string) resp {
			return e.do(req{method: method, path: path, body: body, cookie: cookie, header: map[string]string{"Host": host}})
		}
		jsonOf := func(v any) string { b, _ := json.Marshal(v); return string(b) }

		begin := data(t, at("POST", "/api/auth/passkeys/register/begin", "", cookie))
		cred := k.create(begin["options"].(map[string]any))
		done := data(t, at("POST", "/api/auth/passkeys/register/finish", jsonOf(map[string]any{"ceremony": begin["ceremony"], "name": "laptop", "credential": cred}), cookie))
		if codes, _ := done["backup_codes"].([]any); len(codes) != 10 {
			t.Fatalf("first passkey: %v", done)
		}
		st := data(t, at("GET", "/api/auth/2fa/status", "", cookie))
		if devs := st["devices"].([]any); st["enabled"] != true || len(devs) != 1 || devs[0].(map[string]any)["type"] != "passkey" {
			t.Fatalf("status: %v", st)
		}

		// The login's second step.
		pending := data(t, at("POST", "/api/auth/login", `{"password":"`+goodPassword+`"}`, ""))["pending_token"].(string)
		lb := data(t, at("POST", "/api/auth/login/passkey/begin", jsonOf(map[string]any{"pending_token": pending}), ""))
		answer := k.get(lb["options"].(map[string]any))
		r := at("POST", "/api/auth/login/passkey", jsonOf(map[string]any{"pending_token": pending, "ceremony": lb["ceremony"], "credential": answer}), "")
		session := sessionCookie(t, r)
		if r.Code != 200 || session == nil {
			t.Fatalf("login with the passkey: %d %s", r.Code, r.Body)
		}
		// The same answer again: refused.
		wantError(t, at("POST", "/api/auth/login/passkey", jsonOf(map[string]any{"pending_token": pending, "ceremony": lb["ceremony"], "credential": answer}), ""), 401,
			"the login has expired or is not valid: log in with the password again")

		// A step-up.
		sb := data(t, at("POST", "/api/auth/step-up/passkey", "", session.Value))
		up := data(t, at("POST", "/api/auth/step-up", jsonOf(map[string]any{"ceremony": sb["ceremony"], "passkey": k.get(sb["options"].(map[string]any))}), session.Value))
		if up["recent"] != true || up["passkey"] != true {
			t.Fatalf("step-up: %v", up)
		}

		// Passwordless sign-in.
		data(t, at("PUT", "/api/auth/passkeys/passwordless", `{"on":true}`, session.Value))
		pb := data(t, at("POST", "/api/auth/login/passkey/begin", `{}`, ""))
		r = at("POST", "/api/auth/login/passkey", jsonOf(map[string]any{"ceremony": pb["ceremony"], "credential": k.get(pb["options"].(map[string]any))}), "")
		if r.Code != 200 || sessionCookie(t, r) == nil {
			t.Fatalf("passwordless: %d %s", r.Code, r.Body)
		}

		// Passwordless stays as the operator last set it: removing the
		// last passkey turns it off, and a passkey registered later does
		// not turn it back on by itself.
		id := st["devices"].([]any)[0].(map[string]any)["id"].(string)
		backup := done["backup_codes"].([]any)[0].(string)
		data(t, at("DELETE", "/api/auth/2fa/devices/"+id, jsonOf(map[string]any{"code": backup}), session.Value))
		if got := data(t, at("GET", "/api/auth/status", "", "")); got["passkey_login"] != false || got["totp_enabled"] != false {
			t.Fatalf("status after the last device went: %v", got)
		}
		k2 := newSoftKey(t, host, "http://"+host)
		begin = data(t, at("POST", "/api/auth/passkeys/register/begin", "", session.Value))
		data(t, at("POST", "/api/auth/passkeys/register/finish", jsonOf(map[string]any{"ceremony": begin["ceremony"], "name": "new laptop",
			"credential": k2.create(begin["options"].(map[string]any))}), session.Value))
		if got := data(t, at("GET", "/api/auth/status", "", "")); got["passkey_login"] != false || got["totp_enabled"] != true {
			t.Fatalf("status after a new first passkey: %v", got)
		}
		if kinds := e.auditKinds(); countKind(kinds, "TOTP_PASSWORDLESS_CHANGED") != 2 {
			t.Fatalf("audit: %v", kinds)
		}
	})
}
