package testutil

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// zitadelRedirect is never contacted: SignIn stops at the redirect to it.
const zitadelRedirect = "http://127.0.0.1:1/cb"

// TestZitadelOP: the provider publishes the issuer it was given, with or
// without a trailing slash; a relying party (go-oidc, as the daemon's)
// signs Ana and Carol in through its login form with PKCE and nonce and
// gets their claims; a wrong password is refused; Stop takes it down.
func TestZitadelOP(t *testing.T) {
	for _, slash := range []bool{false, true} {
		name := "NoTrailingSlash"
		if slash {
			name = "TrailingSlash"
		}
		t.Run(name, func(t *testing.T) {
			z := StartZitadelOP(t, ZitadelOPOptions{TrailingSlash: slash, RedirectURIs: []string{zitadelRedirect}})
			want := z.URL
			if slash {
				want += "/"
			}
			if z.Issuer != want {
				t.Fatalf("Issuer %q, want %q", z.Issuer, want)
			}
			// Discovery as OpenID Connect Discovery 1.0 section 4 asks it:
			// the issuer without its trailing slash, then the well-known path.
			u := strings.TrimSuffix(z.Issuer, "/") + "/.well-known/openid-configuration"
			if got := discoveryIssuer(t, u); got != z.Issuer {
				t.Fatalf("%s publishes issuer %q, want %q", u, got, z.Issuer)
			}

			ana := zitadelSignIn(t, z, ZitadelAna, ZitadelAnaPassword)
			t.Logf("ana: ID token %s; userinfo %s", ana.idJSON, ana.uiJSON)
			for where, c := range map[string]map[string]any{"ID token": ana.id, "userinfo": ana.ui} {
				if c["email"] != ZitadelAna || c["email_verified"] != true {
					t.Errorf("ana's %s: email %v, email_verified %v; want %s, true", where, c["email"], c["email_verified"], ZitadelAna)
				}
			}
			if ana.id["iss"] != z.Issuer {
				t.Errorf("ID token iss %v, want %q", ana.id["iss"], z.Issuer)
			}

			carol := zitadelSignIn(t, z, ZitadelCarol, ZitadelCarolPassword)
			t.Logf("carol: ID token %s; userinfo %s", carol.idJSON, carol.uiJSON)
			for where, c := range map[string]map[string]any{"ID token": carol.id, "userinfo": carol.ui} {
				v, present := c["email_verified"]
				if c["email"] != ZitadelCarol || present {
					t.Errorf("carol's %s: email %v, email_verified %v (present %t); want %s and no email_verified (the example OP omits false)", where, c["email"], v, present, ZitadelCarol)
				}
			}

			jar, _ := cookiejar.New(nil)
			_, err := z.TrySignIn(&http.Client{Jar: jar}, zitadelAuthURL(t, z, "s", "n", oauth2.GenerateVerifier()), ZitadelAna, "not-her-password")
			if err == nil || !strings.Contains(err.Error(), "username or password wrong") {
				t.Errorf("a wrong password: %v, want the provider's refusal", err)
			}

			z.Stop()
			_, err = (&http.Client{Timeout: 2 * time.Second}).Get(z.URL + "/.well-known/openid-configuration")
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("after Stop: %v, want connection refused", err)
			}
		})
	}
}

// TestZitadelOPUserinfoOnly: with UserinfoOnly the ID token carries no
// email; the userinfo endpoint does.
func TestZitadelOPUserinfoOnly(t *testing.T) {
	z := StartZitadelOP(t, ZitadelOPOptions{TrailingSlash: true, RedirectURIs: []string{zitadelRedirect}, UserinfoOnly: true})
	ana := zitadelSignIn(t, z, ZitadelAna, ZitadelAnaPassword)
	t.Logf("ana: ID token %s; userinfo %s", ana.idJSON, ana.uiJSON)
	if _, ok := ana.id["email"]; ok {
		t.Errorf("ID token has an email: %s", ana.idJSON)
	}
	if ana.ui["email"] != ZitadelAna || ana.ui["email_verified"] != true {
		t.Errorf("userinfo: %s", ana.uiJSON)
	}
}

func discoveryIssuer(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Issuer string `json:"issuer"`
	}
	if resp.StatusCode != 200 {
		t.Fatalf("%s: status %d", u, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatalf("%s: %v", u, err)
	}
	return doc.Issuer
}

func zitadelOAuth(t *testing.T, z *ZitadelOP) (*oidc.Provider, *oauth2.Config) {
	t.Helper()
	p, err := oidc.NewProvider(context.Background(), z.Issuer)
	if err != nil {
		t.Fatal(err)
	}
	return p, &oauth2.Config{ClientID: z.ClientID, ClientSecret: z.ClientSecret, Endpoint: p.Endpoint(),
		RedirectURL: zitadelRedirect, Scopes: []string{oidc.ScopeOpenID, "email", "profile"}}
}

func zitadelAuthURL(t *testing.T, z *ZitadelOP, state, nonce, verifier string) string {
	_, cfg := zitadelOAuth(t, z)
	return cfg.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier))
}

type zitadelClaims struct {
	id, ui         map[string]any
	idJSON, uiJSON string
}

// zitadelSignIn signs user in as the daemon does (code flow, PKCE S256,
// state and nonce, client_secret_basic) and returns the verified ID
// token's claims and the userinfo answer's.
func zitadelSignIn(t *testing.T, z *ZitadelOP, user, password string) zitadelClaims {
	t.Helper()
	ctx := context.Background()
	p, cfg := zitadelOAuth(t, z)
	verifier := oauth2.GenerateVerifier()
	jar, _ := cookiejar.New(nil)
	back := z.SignIn(t, &http.Client{Jar: jar}, cfg.AuthCodeURL("st-"+user, oidc.Nonce("n-"+user), oauth2.S256ChallengeOption(verifier)), user, password)
	if !strings.HasPrefix(back.String(), zitadelRedirect+"?") || back.Query().Get("code") == "" || back.Query().Get("state") != "st-"+user {
		t.Fatalf("SignIn returned %s, want %s with a code and state st-%s", back, zitadelRedirect, user)
	}
	tok, err := cfg.Exchange(ctx, back.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := p.Verifier(&oidc.Config{ClientID: z.ClientID}).Verify(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	if idt.Nonce != "n-"+user {
		t.Errorf("nonce %q", idt.Nonce)
	}
	var c zitadelClaims
	if err := idt.Claims(&c.id); err != nil {
		t.Fatal(err)
	}
	ui, err := p.UserInfo(ctx, oauth2.StaticTokenSource(tok))
	if err != nil {
		t.Fatal(err)
	}
	if err := ui.Claims(&c.ui); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(c.id)
	c.idJSON = string(b)
	b, _ = json.Marshal(c.ui)
	c.uiJSON = string(b)
	return c
}
