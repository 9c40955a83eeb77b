package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/sshkeys"
)

// FuzzSSHKeyBodies sends arbitrary bodies to the SSH key routes that read
// one (upload, download) and to the id routes with arbitrary ids. No input
// may cause a 5xx, every failure is an error envelope, no answer but a
// successful download carries private key material, and nothing changes:
// no valid key pair or TOTP code can be guessed here.
func FuzzSSHKeyBodies(f *testing.F) {
	f.Add(uint8(0), "", `{"private_key":"-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----","public_key":"ssh-ed25519 AAAA"}`)
	f.Add(uint8(0), "", `{"private_key":"x","public_key":"ssh-rsa AAAAB3NzaC1yc2E= c"}`)
	f.Add(uint8(1), "", `{"code":"123456"}`)
	f.Add(uint8(1), "", `{"password":"x"}`)
	f.Add(uint8(1), "", `{"code":"000000","password":"x"}`)
	f.Add(uint8(2), "x/y", ``)
	f.Add(uint8(3), "x y", ``)
	// One env for every input (see FuzzTwoFABodies), with 2FA on so the
	// download challenge is a cheap code check rather than argon2id.
	e := newEnv(f)
	ctx := context.Background()
	session, err := e.authSvc.Sessions.Create(ctx, "127.0.0.1", "")
	if err != nil {
		f.Fatal(err)
	}
	en, err := e.totp.Enroll(ctx, "localhost")
	if err != nil {
		f.Fatal(err)
	}
	if _, err := e.totp.Confirm(ctx, auth.Client{}, codeFor(f, en.Secret, e.now), "f"); err != nil {
		f.Fatal(err)
	}
	key, err := e.sshkeys.Generate(ctx, auth.Client{}, sshkeys.GenerateRequest{})
	if err != nil {
		f.Fatal(err)
	}
	var n uint32
	f.Fuzz(func(t *testing.T, route uint8, id, body string) {
		e.t = t
		n++
		peer := fmt.Sprintf("[2001:db8::%x:%x]:1", n>>16, n&0xffff)
		if id == "" {
			id = "nope"
		}
		id = url.PathEscape(id)
		var method, path string
		switch route % 4 {
		case 0:
			method, path = "POST", "/api/local/ssh-keys/upload"
		case 1:
			// The existing key, so the challenge itself is fuzzed.
			method, path = "POST", "/api/local/ssh-keys/"+key.ID+"/download"
		case 2:
			method, path = "DELETE", "/api/local/ssh-keys/"+id
		case 3:
			method, path = "PUT", "/api/local/ssh-keys/"+id+"/default"
		}
		r := e.do(req{method: method, path: path, body: body, cookie: session, peer: peer})
		if r.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", method, path, body, r.Code, r.Body)
		}
		if strings.Contains(r.Body.String(), "PRIVATE KEY") {
			t.Fatalf("%s %s %q: private key material in the answer", method, path, body)
		}
		if r.Code >= 400 {
			var env struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(r.Body.Bytes(), &env); err != nil || env.Error == "" {
				t.Fatalf("%s %s %q: %d body %s is not an error envelope", method, path, body, r.Code, r.Body)
			}
		}
		keys, err := e.sshkeys.List(ctx)
		if err != nil || len(keys) != 1 || !keys[0].IsDefault {
			t.Fatalf("%s %s %q changed the keys: %+v %v", method, path, body, keys, err)
		}
	})
}
