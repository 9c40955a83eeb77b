package testutil

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The users of bin/zitadel-op (tools/zitadel-op/main.go), both on the
// domain allowed.test. The provider sends Ana's email with email_verified
// true; Carol's email without email_verified at all (zitadel/oidc's
// UserInfo has `json:"email_verified,omitempty"`, so false is left out),
// in the ID token and the userinfo answer alike.
const (
	ZitadelAna           = "ana@allowed.test"
	ZitadelAnaPassword   = "ana-password"
	ZitadelCarol         = "carol@allowed.test"
	ZitadelCarolPassword = "carol-password"
)

// ZitadelOPOptions configure StartZitadelOP's provider and its one
// confidential web client.
type ZitadelOPOptions struct {
	// TrailingSlash makes the issuer http://127.0.0.1:PORT/ (as the
	// provider publishes it) instead of http://127.0.0.1:PORT.
	TrailingSlash bool
	// ClientID and ClientSecret default to "tunnelsvc" and
	// "zitadel-op-secret". The secret is accepted by client_secret_basic
	// and client_secret_post.
	ClientID, ClientSecret string
	// RedirectURIs are the client's registered redirect URIs (at least
	// one; plain http is accepted).
	RedirectURIs []string
	// UserinfoOnly leaves the email and profile claims out of the ID token
	// (the example's own client does that): only the userinfo endpoint
	// then answers them. By default the ID token carries them too.
	UserinfoOnly bool
}

// ZitadelOP is a running zitadel/oidc example OpenID provider on loopback.
type ZitadelOP struct {
	// Issuer is what the provider publishes in its discovery document
	// (and puts in its ID tokens' iss).
	Issuer string
	// URL is http://127.0.0.1:PORT, without a trailing slash.
	URL                    string
	ClientID, ClientSecret string
	RedirectURIs           []string
	proc                   *Proc
}

var zitadelBuild sync.Mutex

// ZitadelOPBin returns bin/zitadel-op, running `make zitadel-op` first
// when it is missing or older than tools/zitadel-op's sources (about a
// minute cold on 2 cores). A failed build fails the test.
func ZitadelOPBin(t testing.TB) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin", "zitadel-op")
	src := filepath.Join(root, "tools", "zitadel-op")
	zitadelBuild.Lock()
	defer zitadelBuild.Unlock()
	if !zitadelStale(bin, src) {
		return bin
	}
	// One build at a time across test binaries too: go build -o writes
	// the file in place, which another package could run half written.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "tunnelsvc-zitadel-op-build.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if !zitadelStale(bin, src) {
		return bin
	}
	fmt.Fprintln(os.Stderr, "bin/zitadel-op missing or older than tools/zitadel-op; running `make zitadel-op`")
	var out bytes.Buffer
	cmd := exec.Command("make", "-C", root, "zitadel-op")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("these tests need bin/zitadel-op (zitadel/oidc's example OpenID provider): `make zitadel-op` failed: %v\n%s", err, out.String())
	}
	if !exists(bin) {
		t.Fatalf("`make zitadel-op` made no %s:\n%s", bin, out.String())
	}
	return bin
}

// zitadelStale says whether bin is missing or older than go.mod, go.sum or
// a .go file of src (the Makefile rule's prerequisites).
func zitadelStale(bin, src string) bool {
	st, err := os.Stat(bin)
	if err != nil {
		return true
	}
	files, _ := filepath.Glob(filepath.Join(src, "*.go"))
	for _, f := range append(files, filepath.Join(src, "go.mod"), filepath.Join(src, "go.sum")) {
		if fs, err := os.Stat(f); err == nil && fs.ModTime().After(st.ModTime()) {
			return true
		}
	}
	return false
}

// StartZitadelOP builds (when needed) and runs bin/zitadel-op on a free
// loopback port over plain HTTP, and returns once its discovery document
// answers. It is stopped at cleanup.
func StartZitadelOP(t testing.TB, o ZitadelOPOptions) *ZitadelOP {
	t.Helper()
	if len(o.RedirectURIs) == 0 {
		t.Fatal("StartZitadelOP: at least one redirect URI is needed")
	}
	if o.ClientID == "" {
		o.ClientID = "tunnelsvc"
	}
	if o.ClientSecret == "" {
		o.ClientSecret = "zitadel-op-secret"
	}
	bin := ZitadelOPBin(t)
	port := FreePort(t)
	z := &ZitadelOP{URL: fmt.Sprintf("http://127.0.0.1:%d", port), ClientID: o.ClientID,
		ClientSecret: o.ClientSecret, RedirectURIs: o.RedirectURIs}
	issuer := z.URL
	if o.TrailingSlash {
		issuer += "/"
	}
	args := []string{"-addr", fmt.Sprintf("127.0.0.1:%d", port), "-issuer", issuer,
		"-client-id", o.ClientID, "-client-secret", o.ClientSecret,
		fmt.Sprintf("-id-token-claims=%t", !o.UserinfoOnly)}
	for _, r := range o.RedirectURIs {
		args = append(args, "-redirect-uri", r)
	}
	z.proc = Start(t, "zitadel-op", bin, args...)
	c := &http.Client{Timeout: 5 * time.Second}
	Eventually(t, 15*time.Second, "zitadel-op's discovery document answers", func() error {
		if !z.proc.Running() {
			return fmt.Errorf("zitadel-op exited: %v\n%s", z.proc.Err, z.proc.Out.String())
		}
		resp, err := c.Get(z.URL + "/.well-known/openid-configuration")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var doc struct {
			Issuer string `json:"issuer"`
		}
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
			return err
		}
		z.Issuer = doc.Issuer
		return nil
	})
	return z
}

// Stop takes the provider down (SIGTERM, then SIGKILL after 5 s): its port
// then refuses connections. The port stays reserved for the test.
func (z *ZitadelOP) Stop() {
	if !z.proc.Running() {
		return
	}
	z.proc.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-z.proc.Done():
	case <-time.After(5 * time.Second):
		z.proc.Stop()
	}
}

// SignIn follows authURL (a relying party's authorization URL, or a URL
// that redirects to one) with c, fills the provider's login form with
// username and password, and returns the URL the provider then redirects
// to on one of the client's redirect URIs (with code and state), without
// requesting it. c's cookie jar and transport are used; c is not changed.
// Any failure, a refused password included, fails the test.
func (z *ZitadelOP) SignIn(t testing.TB, c *http.Client, authURL, username, password string) *url.URL {
	t.Helper()
	u, err := z.TrySignIn(c, authURL, username, password)
	if err != nil {
		t.Fatalf("signing in as %s at zitadel-op: %v", username, err)
	}
	return u
}

var (
	zitadelForm  = regexp.MustCompile(`(?is)<form\b[^>]*\baction="([^"]*)"`)
	zitadelInput = regexp.MustCompile(`(?is)<input\b[^>]*>`)
	zitadelAttr  = regexp.MustCompile(`(?is)\b(name|value)="([^"]*)"`)
	zitadelError = regexp.MustCompile(`(?is)<p style="color:red[^"]*">(.*?)</p>`)
)

// TrySignIn is SignIn returning its failure: the provider's own message
// when it shows the login form again (e.g. "username or password wrong").
// A redirect to a redirect URI that carries an error instead of a code is
// returned as it is.
func (z *ZitadelOP) TrySignIn(c *http.Client, authURL, username, password string) (*url.URL, error) {
	var back *url.URL
	cc := *c
	cc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		for _, r := range z.RedirectURIs {
			if strings.HasPrefix(req.URL.String(), r) {
				back = req.URL
				return http.ErrUseLastResponse
			}
		}
		if c.CheckRedirect != nil {
			return c.CheckRedirect(req, via)
		}
		if len(via) >= 10 {
			return fmt.Errorf("stopped after 10 redirects")
		}
		return nil
	}
	if cc.Timeout == 0 {
		cc.Timeout = 10 * time.Second
	}
	// The authorization endpoint (/auth) redirects to the login page,
	// /login/username?authRequestID=ID: a form posting id (the auth
	// request's), username and password to /login/username.
	resp, err := cc.Get(authURL)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if back != nil {
		return back, nil
	}
	m := zitadelForm.FindSubmatch(body)
	if resp.StatusCode != 200 || m == nil {
		return nil, fmt.Errorf("%s answered %d without a login form: %s", resp.Request.URL, resp.StatusCode, snippet(body))
	}
	action, err := resp.Request.URL.Parse(html.UnescapeString(string(m[1])))
	if err != nil {
		return nil, err
	}
	form := url.Values{}
	for _, in := range zitadelInput.FindAll(body, -1) {
		var name, value string
		for _, a := range zitadelAttr.FindAllSubmatch(in, -1) {
			if strings.EqualFold(string(a[1]), "name") {
				name = html.UnescapeString(string(a[2]))
			} else {
				value = html.UnescapeString(string(a[2]))
			}
		}
		if name != "" {
			form.Set(name, value)
		}
	}
	if form.Get("id") == "" {
		return nil, fmt.Errorf("the login form at %s has no auth request id: %s", resp.Request.URL, snippet(body))
	}
	form.Set("username", username)
	form.Set("password", password)
	// A good password: 302 to /auth/callback?id=ID, which redirects to the
	// redirect URI with code and state. A bad one: the form again, 200,
	// with the error in red.
	resp, err = cc.PostForm(action.String(), form)
	if err != nil {
		return nil, err
	}
	body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if back != nil {
		return back, nil
	}
	if m := zitadelError.FindSubmatch(body); m != nil && len(bytes.TrimSpace(m[1])) > 0 {
		return nil, fmt.Errorf("the provider refused the sign-in: %s", html.UnescapeString(string(bytes.TrimSpace(m[1]))))
	}
	return nil, fmt.Errorf("after the login form %s answered %d, not a redirect to %v: %s", resp.Request.URL, resp.StatusCode, z.RedirectURIs, snippet(body))
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}
