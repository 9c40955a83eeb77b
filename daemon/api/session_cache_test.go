package api

import (
	"context"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
)

// TestEndedSessionRefusedAtOnce: sessions are remembered between requests,
// yet a session ended by a logout, deleted by another process on the same
// database (as `tunnelsvc reset-password` does; TestResetPasswordWhileRunning in
// cmd/tunnelsvc runs the command itself against a running daemon), or
// past its end is refused on the very next request, while the others go
// on. These are every way a session ends: the 2FA routes and
// `tunnelsvc disable-2fa` end none (spec §4.1 gives them no such effect).
func TestEndedSessionRefusedAtOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string) {
		e := newEnvOn(t, engine)
		a := e.setup()
		b := sessionCookie(t, e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`})).Value
		get := func(token string) int {
			return e.do(req{method: "GET", path: "/api/security/logs", cookie: token}).Code
		}
		for i := 0; i < 3; i++ {
			if get(a) != 200 || get(b) != 200 {
				t.Fatalf("live sessions refused: %d %d", get(a), get(b))
			}
		}

		if r := e.do(req{method: "POST", path: "/api/auth/logout", cookie: a}); r.Code != 200 {
			t.Fatalf("logout: %d %s", r.Code, r.Body)
		}
		if got := get(a); got != 401 {
			t.Fatalf("the logged-out session answered %d", got)
		}
		if got := get(b); got != 200 {
			t.Fatalf("the other session answered %d after a logout", got)
		}

		other := e.db.open(t)
		if _, err := other.DeleteAllSessions(context.Background(), time.Now()); err != nil {
			t.Fatal(err)
		}
		if got := get(b); got != 401 {
			t.Fatalf("a session deleted from another handle answered %d", got)
		}
		other.Close()
		c := sessionCookie(t, e.do(req{method: "POST", path: "/api/auth/login", body: `{"password":"` + goodPassword + `"}`})).Value
		if got := get(c); got != 200 {
			t.Fatalf("a new session answered %d", got)
		}

		// Expiry needs no write at all: a session remembered a moment before
		// its end is refused from its end on.
		e.now = e.now.Add(auth.SessionTTL - time.Second)
		if got := get(c); got != 200 {
			t.Fatalf("a session one second before its end answered %d", got)
		}
		e.now = e.now.Add(time.Second)
		if got := get(c); got != 401 {
			t.Fatalf("an expired session answered %d", got)
		}
	})
}
