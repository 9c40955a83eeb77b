// Command zitadel-op serves zitadel/oidc's example OpenID provider (the
// version pinned in go.mod: example/server/exampleop and
// example/server/storage, the library's own code) on loopback, over plain
// HTTP, for the SSO tests: a second provider, written by other people than
// the tests' own, with two users and one confidential web client given on
// the command line. `make zitadel-op` builds bin/zitadel-op;
// daemon/internal/testutil starts it and signs in through its login form.
//
// Users (username / password, email):
//
//	ana@allowed.test   / ana-password   email verified
//	carol@allowed.test / carol-password email NOT verified
//
// Everything lives in memory: a restart forgets codes, tokens and sessions
// and makes a new signing key.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"
)

// listFlag is a flag that may be repeated, each value comma separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// users is the example storage's UserStore with this program's users.
type users map[string]*storage.User

func (u users) GetUserByID(id string) *storage.User { return u[id] }

func (u users) GetUserByUsername(name string) *storage.User {
	for _, user := range u {
		if user.Username == name {
			return user
		}
	}
	return nil
}

// ExampleClientID is the example's JWT-profile service user, kept as the
// example has it (the storage looks its keys up under this name).
func (u users) ExampleClientID() string { return storage.ServiceUserID }

var testUsers = users{
	"ana": {
		ID: "ana", Username: "ana@allowed.test", Password: "ana-password",
		FirstName: "Ana", LastName: "Allowed",
		Email: "ana@allowed.test", EmailVerified: true,
		PreferredLanguage: language.English,
	},
	"carol": {
		ID: "carol", Username: "carol@allowed.test", Password: "carol-password",
		FirstName: "Carol", LastName: "Unverified",
		Email: "carol@allowed.test", EmailVerified: false,
		PreferredLanguage: language.English,
	},
}

// store is the example's storage; only the clients it hands the provider
// change, when idTokenClaims is set: storage.WebClient always answers
// IDTokenUserinfoClaimsAssertion with false (its field is unexported), so
// the ID token of a code flow would carry no email or profile claims and
// a relying party would have to ask the userinfo endpoint.
type store struct {
	*storage.Storage
	idTokenClaims bool
}

func (s *store) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil || !s.idTokenClaims {
		return c, err
	}
	return claimsInIDToken{c}, nil
}

// claimsInIDToken asserts the claims of the profile, email, phone and
// address scopes into the ID token as well as the userinfo answer.
type claimsInIDToken struct{ op.Client }

func (claimsInIDToken) IDTokenUserinfoClaimsAssertion() bool { return true }

func main() {
	addr := flag.String("addr", "127.0.0.1:9998", "`host:port` to listen on (plain HTTP)")
	issuer := flag.String("issuer", "", "issuer `URL`, published exactly as given (a trailing slash is kept); default http://ADDR/")
	clientID := flag.String("client-id", "web", "the confidential web client's `id`")
	clientSecret := flag.String("client-secret", "secret", "the web client's `secret` (client_secret_basic or client_secret_post)")
	var redirects listFlag
	flag.Var(&redirects, "redirect-uri", "the web client's redirect `URI`s (repeatable, or comma separated)")
	idTokenClaims := flag.Bool("id-token-claims", true, "put the email and profile claims in the ID token too (false: only the userinfo endpoint answers them)")
	flag.Parse()
	if len(redirects) == 0 {
		fmt.Fprintln(os.Stderr, "zitadel-op: at least one -redirect-uri is needed")
		os.Exit(2)
	}
	if *issuer == "" {
		*issuer = "http://" + *addr + "/"
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// WebClient: a confidential client (op.ApplicationTypeWeb, secret
	// checked by Basic auth or, since the example's op.Config sets
	// AuthMethodPost, a form post), response type code, PKCE S256 checked
	// when the authorization request carried a challenge, and DevMode, which
	// lets its redirect URIs be plain http.
	clients := map[string]*storage.Client{*clientID: storage.WebClient(*clientID, *clientSecret, redirects...)}
	st := &store{Storage: storage.NewStorageWithClients(testUsers, clients), idTokenClaims: *idTokenClaims}
	// SetupServer passes op.WithAllowInsecure(), which lets the issuer be http.
	router := exampleop.SetupServer(*issuer, st, logger, false)

	l, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "zitadel-op:", err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: router, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	fmt.Printf("zitadel-op: listening on http://%s (issuer %s)\n", l.Addr(), *issuer)
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "zitadel-op:", err)
		os.Exit(1)
	}
	<-stopped
}
