package api

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
)

func (e *machinesEnv) withToken(method, path, token, body string) resp {
	return e.do(req{method: method, path: path, body: body, peer: "198.51.100.20:5000", header: map[string]string{"Authorization": "Bearer " + token}})
}

// TestAPITokens: a token is shown once and stored hashed; Authorization:
// Bearer works on the routes its scope allows, also with 2FA on; a read
// token only reads; no token manages tokens or 2FA or does what needs a
// recent sign-in; a revoked token is refused at its next request; bad
// tokens are refused, audited and rate-limited like passwords; what a
// token does is audited under its name.
func TestAPITokens(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newMachinesEnvOn(t, engine, wide)
		// 2FA on: tokens do not need a code.
		e.enableTOTP(e.cookie, "phone")

		wantError(t, e.do(req{method: "POST", path: "/api/tokens", body: `{"name":"ci","scope":"admin"}`, cookie: e.cookie}), 400, `scope must be "read" or "write"`)
		wantError(t, e.do(req{method: "POST", path: "/api/tokens", body: `{"name":" ","scope":"read"}`, cookie: e.cookie}), 400, "name required")
		wantError(t, e.do(req{method: "POST", path: "/api/tokens", body: `{"name":"ci","scope":"read","expires_in_days":0}`, cookie: e.cookie}), 400, "expires_in_days must be between 1 and 365")
		wantError(t, e.do(req{method: "POST", path: "/api/tokens", body: `{"name":"ci","scope":"read","expires_in_days":366}`, cookie: e.cookie}), 400, "expires_in_days must be between 1 and 365")
		if ts := e.list(t, "/api/tokens"); len(ts) != 0 {
			t.Fatalf("refused creations left tokens: %v", ts)
		}

		w := e.data(t, e.do(req{method: "POST", path: "/api/tokens", body: `{"name":"ci","scope":"write","expires_in_days":30}`, cookie: e.cookie}), 201)
		write, _ := w["token"].(string)
		if !strings.HasPrefix(write, "tsvc_") || w["scope"] != "write" || w["last_used_at"] != nil {
			t.Fatalf("created: %v", w)
		}
		wantError(t, e.do(req{method: "POST", path: "/api/tokens", body: `{"name":"ci","scope":"read"}`, cookie: e.cookie}), 409,
			`an API token named "ci" exists: choose another name, or revoke it first`)
		r := e.data(t, e.do(req{method: "POST", path: "/api/tokens", body: `{"name":"dashboards","scope":"read"}`, cookie: e.cookie}), 201)
		read := r["token"].(string)

		// The list never shows a secret; the store keeps only a hash.
		list := e.do(req{method: "GET", path: "/api/tokens", cookie: e.cookie})
		if strings.Contains(list.Body.String(), write) || strings.Contains(list.Body.String(), read) || strings.Contains(list.Body.String(), `"token"`) {
			t.Fatalf("the list shows a secret: %s", list.Body)
		}
		stored, err := e.st.ListAPITokens(context.Background())
		if err != nil || len(stored) != 2 {
			t.Fatalf("stored tokens: %v %v", stored, err)
		}
		for _, st := range stored {
			if strings.Contains(st.TokenHash, write[5:]) || strings.Contains(st.TokenHash, read[5:]) || len(st.TokenHash) < 32 {
				t.Fatalf("the database holds a token in clear: %+v", st)
			}
		}

		// The write token: reads and writes, named in the audit log.
		id, _ := e.machine(t)
		if got := e.withToken("GET", "/api/machines/"+id, write, ""); got.Code != 200 {
			t.Fatalf("GET with the write token: %d %s", got.Code, got.Body)
		}
		tun := e.data(t, e.withToken("POST", "/api/tunnels", write, `{"machine_id":`+id+`,"name":"db","kind":"tcp","local_port":5432}`), 201)
		found := false
		for _, a := range e.list(t, "/api/security/logs") {
			m := a.(map[string]any)
			if m["kind"] == "TUNNEL_CREATED" && strings.HasSuffix(fmt.Sprint(m["detail"]), `(by API token "ci")`) {
				found = true
			}
		}
		if !found {
			t.Fatalf("the tunnel's creation is not audited under the token's name: %v", e.list(t, "/api/security/logs"))
		}
		// Its last use shows.
		for _, x := range e.list(t, "/api/tokens") {
			m := x.(map[string]any)
			if m["name"] == "ci" && (m["last_used_at"] == nil || m["last_used_addr"] != "198.51.100.20") {
				t.Fatalf("last use not recorded: %v", m)
			}
		}

		// The scheme's name in any case (RFC 9110 §11.1).
		if got := e.do(req{method: "GET", path: "/api/machines", peer: "198.51.100.20:5000", header: map[string]string{"Authorization": "bearer " + write}}); got.Code != 200 {
			t.Fatalf("GET with `bearer`: %d %s", got.Code, got.Body)
		}
		// No token generates, uploads or downloads a private key; what a
		// token may do to keys (delete one) is audited under its name, by
		// the key service itself.
		key := e.data(t, e.do(req{method: "POST", path: "/api/local/ssh-keys/generate", body: `{"name":"ops","type":"ed25519"}`, cookie: e.cookie}), 200)
		keyID := fmt.Sprint(key["id"])
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/api/local/ssh-keys/generate", `{"name":"more","type":"ed25519"}`},
			{"POST", "/api/local/ssh-keys/upload", `{"name":"up","private_key":"x"}`},
			{"POST", "/api/local/ssh-keys/" + keyID + "/download", `{"password":"` + goodPassword + `"}`},
		} {
			wantError(t, e.withToken(c.method, c.path, write, c.body), 403,
				"API tokens cannot be used here: API tokens, two-factor, passkeys, single sign-on, the password and what needs a recent sign-in are for the operator signed in to the dashboard")
		}
		e.data(t, e.withToken("DELETE", "/api/local/ssh-keys/"+keyID, write, ""), 200)
		if got := e.lastAudit("SSH_KEY_DELETED"); !strings.HasSuffix(got, `(by API token "ci")`) {
			t.Fatalf("the key's deletion is not audited under the token's name: %q", got)
		}

		// The read token reads only.
		if got := e.withToken("GET", "/api/tunnels", read, ""); got.Code != 200 {
			t.Fatalf("GET with the read token: %d %s", got.Code, got.Body)
		}
		wantError(t, e.withToken("DELETE", fmt.Sprintf("/api/tunnels/%v", tun["id"]), read, ""), 403,
			"this API token is read-only (scope read): it may only send GET requests")

		// No token manages tokens, 2FA, or what needs a recent sign-in.
		forbidden := "API tokens cannot be used here: API tokens, two-factor, passkeys, single sign-on, the password and what needs a recent sign-in are for the operator signed in to the dashboard"
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/api/tokens", ""},
			{"POST", "/api/tokens", `{"name":"more","scope":"write"}`},
			{"GET", "/api/auth/2fa/status", ""},
			{"POST", "/api/auth/2fa/disable", `{"code":"000000"}`},
			{"POST", "/api/edges/tokens", `{}`},
		} {
			wantError(t, e.withToken(c.method, c.path, write, c.body), 403, forbidden)
		}
		if ts := e.list(t, "/api/tokens"); len(ts) != 2 {
			t.Fatalf("tokens after the refusals: %v", ts)
		}

		// Revoked: refused at once.
		e.data(t, e.do(req{method: "DELETE", path: fmt.Sprintf("/api/tokens/%v", w["id"]), cookie: e.cookie}), 200)
		wantError(t, e.withToken("GET", "/api/machines", write, ""), 401, "invalid or expired API token")
		wantError(t, e.do(req{method: "DELETE", path: fmt.Sprintf("/api/tokens/%v", w["id"]), cookie: e.cookie}), 404, "API token not found")
		kinds := e.auditKinds()
		for _, k := range []string{"API_TOKEN_CREATED", "API_TOKEN_REVOKED", "API_TOKEN_FAILED"} {
			if countKind(kinds, k) == 0 {
				t.Errorf("no %s in the audit log: %v", k, kinds)
			}
		}

		// Bad tokens count like wrong passwords: the address is then
		// turned away, good token or not, and says when to come back.
		var last resp
		for i := 0; i < 12; i++ {
			last = e.withToken("GET", "/api/machines", "tsvc_guess"+fmt.Sprint(i), "")
			if last.Code == 429 {
				break
			}
		}
		if last.Code != 429 || last.Header().Get("Retry-After") == "" {
			t.Fatalf("after bad tokens: %d %s", last.Code, last.Body)
		}
		if got := e.withToken("GET", "/api/machines", read, ""); got.Code != 429 {
			t.Fatalf("a good token from a limited address: %d", got.Code)
		}
	})
}

// TestAPITokensCIScript runs docs/api.md's CI script, as written there,
// against the API on loopback with a write token: it prints the join
// command of a new machine and creates the HTTP tunnel.
func TestAPITokensCIScript(t *testing.T) {
	for _, tool := range []string{"curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (scripts/install-deps.sh installs it)", tool)
		}
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```sh\n(#!/bin/sh\n# TUNNELSVC_URL=.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/api.md has no CI script")
	}
	e := newMachinesEnv(t, wide)
	e.expose(t, machines.Exposure{Domain: "example.com"})
	e.data(t, e.bootstrap(t, e.token(t), "web-1"), 200)
	tok := e.data(t, e.do(req{method: "POST", path: "/api/tokens", body: `{"name":"ci","scope":"write"}`, cookie: e.cookie}), 201)["token"].(string)
	srv := httptest.NewServer(e.srv)
	defer srv.Close()
	cmd := exec.Command("sh", "-c", string(m[1]))
	cmd.Env = append(os.Environ(), "TUNNELSVC_URL="+srv.URL, "TUNNELSVC_TOKEN="+tok)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the script: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "curl -fsSL ") || !strings.Contains(lines[0], "bash bootstrap.sh ") || lines[1] != "https://preview.example.com" {
		t.Fatalf("the script printed:\n%s", out)
	}
	ts := e.list(t, "/api/tunnels")
	if len(ts) != 1 || ts[0].(map[string]any)["subdomain"] != "preview" {
		t.Fatalf("tunnels after the script: %v", ts)
	}
}
