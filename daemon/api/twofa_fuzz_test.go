package api

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
)

// twoFARoutes are the 2FA routes that read a JSON body.
var twoFARoutes = []struct{ method, path string }{
	{"POST", "/api/auth/login/2fa"},
	{"POST", "/api/auth/2fa/confirm"},
	{"POST", "/api/auth/2fa/disable"},
	{"DELETE", "/api/auth/2fa/devices/d1"},
	{"POST", "/api/auth/2fa/backup-codes/regenerate"},
}

// FuzzTwoFABodies sends arbitrary bodies to every 2FA route that reads one.
// Whatever arrives, the answer is a JSON envelope with a 4xx and a message
// (no code or token can be guessed here), and 2FA stays off.
func FuzzTwoFABodies(f *testing.F) {
	for i := range twoFARoutes {
		f.Add(uint8(i), `{"code":"123456"}`)
		f.Add(uint8(i), `{"pending_token":"x","code":"ABCDE-FGHIJ","name":"n"}`)
		f.Add(uint8(i), `{"code":5}`)
		f.Add(uint8(i), ``)
	}
	// One env for every input: building one per input (database,
	// migrations, QR) would leave the fuzzer a few executions a second.
	e := newEnv(f)
	session, err := e.authSvc.Sessions.Create(context.Background(), "127.0.0.1", "")
	if err != nil {
		f.Fatal(err)
	}
	if _, err := e.totp.Enroll(context.Background(), "localhost"); err != nil {
		f.Fatal(err)
	}
	var n uint32
	f.Fuzz(func(t *testing.T, route uint8, body string) {
		e.t = t
		// A new client address each time, so the shared rate limit (which
		// the failures fill) does not turn every later answer into a 429.
		n++
		peer := fmt.Sprintf("[2001:db8::%x:%x]:1", n>>16, n&0xffff)
		rt := twoFARoutes[int(route)%len(twoFARoutes)]
		r := e.do(req{method: rt.method, path: rt.path, body: body, cookie: session, peer: peer})
		if r.Code < 400 || r.Code >= 500 {
			t.Fatalf("%s %s %q: status %d %s", rt.method, rt.path, body, r.Code, r.Body)
		}
		var env struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(r.Body.Bytes(), &env); err != nil || env.Error == "" {
			t.Fatalf("%s %s %q: body %s is not an error envelope", rt.method, rt.path, body, r.Body)
		}
		if on, _ := e.totp.Enabled(context.Background()); on {
			t.Fatalf("%s %q enabled 2FA", rt.path, body)
		}
	})
}
