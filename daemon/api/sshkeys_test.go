package api

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

func keyList(t testing.TB, r resp) []map[string]any {
	t.Helper()
	if r.Code != 200 {
		t.Fatalf("list: %d %s", r.Code, r.Body)
	}
	var body struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal(r.Body.Bytes(), &body); err != nil || body.Data == nil {
		t.Fatalf("list body %s: %v", r.Body, err)
	}
	return body.Data
}

func noPrivate(t testing.TB, what string, r resp) {
	t.Helper()
	if strings.Contains(r.Body.String(), "PRIVATE KEY") {
		t.Fatalf("%s answer contains private key material: %s", what, r.Body)
	}
}

func TestSSHKeysHTTP(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newEnvOn(t, engine)
		session := e.setup()
		call := func(method, path, body string) resp {
			return e.do(req{method: method, path: path, body: body, cookie: session})
		}
		if keys := keyList(t, call("GET", "/api/local/ssh-keys", "")); len(keys) != 0 {
			t.Fatalf("fresh list %v", keys)
		}

		// Generate: an empty body is all defaults; the first key is default.
		r := call("POST", "/api/local/ssh-keys/generate", "")
		noPrivate(t, "generate", r)
		first := data(t, r)
		var fields []string
		for k := range first {
			fields = append(fields, k)
		}
		sort.Strings(fields)
		if strings.Join(fields, ",") != "created_at,fingerprint,id,is_default,machine_count,name,public_key" {
			t.Fatalf("key record fields %v", fields)
		}
		if first["name"] != "Unnamed key" || first["is_default"] != true || first["machine_count"] != 0.0 ||
			!strings.HasPrefix(first["public_key"].(string), "ssh-ed25519 ") || !strings.HasPrefix(first["fingerprint"].(string), "SHA256:") {
			t.Fatalf("generated %v", first)
		}
		r = call("POST", "/api/local/ssh-keys/generate", `{"name":"rsa one","type":"rsa","set_default":false}`)
		noPrivate(t, "generate rsa", r)
		rsaKey := data(t, r)
		if rsaKey["is_default"] != false || !strings.HasPrefix(rsaKey["public_key"].(string), "ssh-rsa ") {
			t.Fatalf("rsa %v", rsaKey)
		}
		wantError(t, call("POST", "/api/local/ssh-keys/generate", `{"type":"dsa"}`), 400, "type must be ed25519 or rsa")
		wantError(t, call("POST", "/api/local/ssh-keys/generate", `{"name":`), 400, "invalid request body")

		// Upload: required fields, a mismatched pair, then a good one.
		pub, priv, _ := ed25519.GenerateKey(rand.Reader)
		otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
		block, _ := ssh.MarshalPrivateKey(priv, "")
		privText := string(pem.EncodeToMemory(block))
		line := func(k ed25519.PublicKey) string {
			p, _ := ssh.NewPublicKey(k)
			return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(p)))
		}
		upload := func(name, privKey, pubKey string) resp {
			b, _ := json.Marshal(map[string]any{"name": name, "private_key": privKey, "public_key": pubKey})
			return call("POST", "/api/local/ssh-keys/upload", string(b))
		}
		wantError(t, upload("", "", line(pub)), 400, "private_key and public_key are required")
		wantError(t, upload("", privText, ""), 400, "private_key and public_key are required")
		r = upload("", privText, line(otherPub))
		wantError(t, r, 400, "private_key and public_key do not match")
		noPrivate(t, "refused upload", r)
		wantError(t, upload("", "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n", line(pub)), 400, "")
		wantError(t, call("POST", "/api/local/ssh-keys/upload", `{"private_key":1}`), 400, "invalid request body")
		r = upload("", privText, line(pub))
		noPrivate(t, "upload", r)
		up := data(t, r)
		if up["name"] != "Uploaded key" || up["is_default"] != false || !strings.HasPrefix(up["public_key"].(string), line(pub)) {
			t.Fatalf("uploaded %v", up)
		}

		r = call("GET", "/api/local/ssh-keys", "")
		noPrivate(t, "list", r)
		keys := keyList(t, r)
		if len(keys) != 3 {
			t.Fatalf("list %v", keys)
		}

		// Exactly one default; the default is not deletable while others exist.
		wantError(t, call("PUT", "/api/local/ssh-keys/nope/default", ""), 400, "key not found")
		if r := call("PUT", "/api/local/ssh-keys/"+rsaKey["id"].(string)+"/default", ""); r.Code != 200 {
			t.Fatalf("set default: %d %s", r.Code, r.Body)
		}
		var defaults []string
		for _, k := range keyList(t, call("GET", "/api/local/ssh-keys", "")) {
			if k["is_default"] == true {
				defaults = append(defaults, k["id"].(string))
			}
		}
		if len(defaults) != 1 || defaults[0] != rsaKey["id"] {
			t.Fatalf("defaults %v, want only %v", defaults, rsaKey["id"])
		}
		wantError(t, call("DELETE", "/api/local/ssh-keys/"+rsaKey["id"].(string), ""), 400,
			"this is the default key: make another key the default before deleting it")
		wantError(t, call("DELETE", "/api/local/ssh-keys/nope", ""), 400, "key not found")
		if r := call("DELETE", "/api/local/ssh-keys/"+up["id"].(string), ""); r.Code != 200 {
			t.Fatalf("delete: %d %s", r.Code, r.Body)
		}
		if n := len(keyList(t, call("GET", "/api/local/ssh-keys", ""))); n != 2 {
			t.Fatalf("%d keys after delete", n)
		}
	})
}

func TestSSHKeyDownload(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newEnvOn(t, engine)
		session := e.setup()
		key := data(t, e.do(req{method: "POST", path: "/api/local/ssh-keys/generate", body: `{"name":"k"}`, cookie: session}))
		id := key["id"].(string)
		peer := "198.51.100.40:5555"
		download := func(id, body string) resp {
			return e.do(req{method: "POST", path: "/api/local/ssh-keys/" + id + "/download", body: body, cookie: session, peer: peer})
		}
		wantError(t, download(id, ``), 400, "invalid request body")
		wantError(t, download(id, `{"password":5}`), 400, "invalid request body")
		wantError(t, download("nope", `{"password":"`+goodPassword+`"}`), 404, "key not found")
		wantError(t, download(id, `{}`), 400, "password is required")
		wantError(t, download(id, `{"password":"wrong"}`), 401, "invalid password")
		if countKind(e.auditKinds(), "STEP_UP_FAILED") != 1 {
			t.Fatalf("failed step-up not audited: %v", e.auditKinds())
		}

		r := download(id, `{"password":"`+goodPassword+`"}`)
		if r.Code != 200 {
			t.Fatalf("download: %d %s", r.Code, r.Body)
		}
		h := r.Header()
		if ct := h.Values("Content-Type"); len(ct) != 1 || ct[0] != "application/octet-stream" {
			t.Fatalf("Content-Type %q", ct)
		}
		if cd := h.Values("Content-Disposition"); len(cd) != 1 || cd[0] != "attachment; filename=tunnel_id_rsa" {
			t.Fatalf("Content-Disposition %q", cd)
		}
		if !strings.HasPrefix(r.Body.String(), "-----BEGIN OPENSSH PRIVATE KEY-----\n") {
			t.Fatalf("body %.60q", r.Body.String())
		}
		// The real ssh-keygen reads the file and finds the listed fingerprint.
		file := filepath.Join(t.TempDir(), "tunnel_id_rsa")
		if err := os.WriteFile(file, r.Body.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("ssh-keygen", "-l", "-f", file).CombinedOutput()
		if err != nil {
			t.Fatalf("ssh-keygen -l: %v: %s", err, out)
		}
		if !strings.Contains(string(out), key["fingerprint"].(string)) {
			t.Fatalf("ssh-keygen says %q, list says %s", out, key["fingerprint"])
		}
		// And derives the same public key from it.
		out, err = exec.Command("ssh-keygen", "-y", "-f", file).CombinedOutput()
		if err != nil || !strings.HasPrefix(key["public_key"].(string), strings.TrimSpace(string(out))) {
			t.Fatalf("ssh-keygen -y: %v %q vs %q", err, out, key["public_key"])
		}

		entries, _ := e.st.ListAudit(t.Context(), 1)
		if en := entries[0]; en.Kind != "SSH_KEY_DOWNLOADED" || en.ClientAddr != "198.51.100.40" || en.Detail != `key "k" (`+id+`) downloaded` {
			t.Fatalf("audit %+v", en)
		}

		// With 2FA on the challenge is a TOTP code, not the password.
		secret, backups := e.enableTOTP(session, "phone")
		e.now = e.now.Add(30 * time.Second)
		wantError(t, download(id, `{"password":"`+goodPassword+`"}`), 400, "code is required")
		wantError(t, download(id, `{"code":"`+backups[0]+`"}`), 401, "invalid code")
		code := codeFor(t, secret, e.now)
		if r := download(id, `{"code":"`+code+`"}`); r.Code != 200 || !strings.Contains(r.Body.String(), "OPENSSH PRIVATE KEY") {
			t.Fatalf("download with code: %d %s", r.Code, r.Body)
		}
		wantError(t, download(id, `{"code":"`+code+`"}`), 401, "this code was already used; wait for the next one")
		if n := countKind(e.auditKinds(), "SSH_KEY_DOWNLOADED"); n != 2 {
			t.Fatalf("SSH_KEY_DOWNLOADED %d times, want 2", n)
		}
		if n := countKind(e.auditKinds(), "STEP_UP_FAILED"); n != 3 {
			t.Fatalf("STEP_UP_FAILED %d times, want 3", n)
		}
	})
}

func TestSSHKeyRoutesNeedSession(t *testing.T) {
	e := newEnv(t)
	e.setup()
	for _, rt := range []struct{ method, path string }{
		{"GET", "/api/local/ssh-keys"}, {"POST", "/api/local/ssh-keys/generate"}, {"POST", "/api/local/ssh-keys/upload"},
		{"DELETE", "/api/local/ssh-keys/x"}, {"PUT", "/api/local/ssh-keys/x/default"}, {"POST", "/api/local/ssh-keys/x/download"},
	} {
		wantError(t, e.do(req{method: rt.method, path: rt.path, body: `{}`}), 401, "authentication required")
	}
}
