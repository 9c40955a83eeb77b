package gate_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/gate"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/machines"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// TestMain: the gate's tests check what visitors are answered, not what
// argon2id costs (the auth package's own tests keep the real cost).
func TestMain(m *testing.M) {
	auth.LowCostForTests()
	os.Exit(testutil.RunWithPostgres(m))
}

// Two edges on one database: a password session made through one is
// honoured by the other; a sign-in code the dashboard issued on one is
// taken on the other, once; an access change made on one ends the
// session on both.
func TestSessionsAcrossEdges(t *testing.T) {
	ctx := context.Background()
	dbURL := testutil.PostgresURL(t)
	a := newEnvOn(t, dbURL, 0, map[string]string{"pw": gate.Password, "op": gate.Operator})
	stB, err := store.OpenDatabase(ctx, t.TempDir(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stB.Close() })
	gB := gate.New(gate.Options{Store: stB, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Domain: func(context.Context) (string, error) { return "example.com", nil }})
	if err := gB.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	b := &env{st: stB, svc: a.svc, g: gB, h: gB.Handler(), ids: a.ids}

	c := a.signIn(t, "pw.example.com")
	if w := b.check("pw.example.com", gate.CookieName+"="+c, "", "/"); w.Code != http.StatusOK {
		t.Fatalf("edge B refused edge A's session: %d %v", w.Code, w.Header())
	}
	if w := b.check("pw.example.com", gate.CookieName+"=forged", "", "/"); w.Code == http.StatusOK {
		t.Fatal("edge B let a forged cookie in")
	}

	code, host, err := a.g.IssueCode("op.example.com")
	if err != nil {
		t.Fatal(err)
	}
	cb := func(e *env, code string) int {
		r := httptest.NewRequest("GET", gate.Prefix+"callback?code="+url.QueryEscape(code)+"&next=/", nil)
		r.Host, r.RemoteAddr = host, "127.0.0.1:1"
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		return w.Code
	}
	if got := cb(b, code); got != http.StatusSeeOther {
		t.Fatalf("edge B redeeming edge A's code: %d", got)
	}
	if got := cb(a, code); got != http.StatusUnauthorized {
		t.Fatalf("the code taken twice (on A after B): %d", got)
	}

	// The operator changes the tunnel's access on A: B's next reload (the
	// change feed, or its 5 s pass) ends the session there too.
	op := "operator"
	if _, err := a.svc.UpdateTunnel(ctx, a.ids["pw"], machines.TunnelInput{Access: &op}); err != nil {
		t.Fatal(err)
	}
	if err := gB.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if w := b.check("pw.example.com", gate.CookieName+"="+c, "", "/"); w.Code == http.StatusOK {
		t.Fatal("the session outlived the access change on edge B")
	}
}

// TestSSOVisitorAcrossEdges: the visitor an sso code signs in is known on
// every edge: a code issued on edge A and redeemed on edge B starts a
// session there that names them, and edge A passes that session on with
// the same headers.
func TestSSOVisitorAcrossEdges(t *testing.T) {
	ctx := context.Background()
	dbURL := testutil.PostgresURL(t)
	a := newEnvOn(t, dbURL, 0, map[string]string{"team": gate.SSO})
	stB, err := store.OpenDatabase(ctx, t.TempDir(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stB.Close() })
	gB := gate.New(gate.Options{Store: stB, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Domain: func(context.Context) (string, error) { return "example.com", nil }})
	if err := gB.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	b := &env{st: stB, svc: a.svc, g: gB, h: gB.Handler(), ids: a.ids}

	code, host, err := a.g.IssueSSOCode("team.example.com", "ana@example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", gate.Prefix+"callback?code="+url.QueryEscape(code)+"&next=/", nil)
	r.Host, r.RemoteAddr = host, "127.0.0.1:1"
	w := httptest.NewRecorder()
	b.h.ServeHTTP(w, r)
	cookie := strings.SplitN(w.Header().Get("Set-Cookie"), ";", 2)[0]
	if w.Code != http.StatusSeeOther || !strings.HasPrefix(cookie, gate.CookieName+"=") {
		t.Fatalf("callback on B: %d %v", w.Code, w.Header())
	}
	for name, e := range map[string]*env{"B": b, "A": a} {
		w := e.check("team.example.com", cookie, "127.0.0.1", "/")
		if w.Code != http.StatusOK || w.Header().Get(gate.UserHeader) != "ana" || w.Header().Get(gate.EmailHeader) != "ana@example.com" {
			t.Fatalf("edge %s: %d %v", name, w.Code, w.Header())
		}
	}
}
