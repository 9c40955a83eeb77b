// Package sso signs the operator in through an OpenID Connect provider:
// the authorization code flow with PKCE, state and nonce checked, and the
// identity (email, domain, groups) checked against who may enter.
package sso

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// settingsKey holds the settings, as JSON (the client secret sealed).
const settingsKey = "sso"

// FlowTTL bounds a sign-in at the provider.
const FlowTTL = 10 * time.Minute

// DiscoveryTimeout bounds asking the provider for its configuration.
const DiscoveryTimeout = 10 * time.Second

// Purposes of a flow: the dashboard, or an access gate's tunnel
// (PurposeGate followed by the tunnel's host).
const (
	PurposeDashboard = "dashboard"
	PurposeGate      = "gate:"
)

// Settings are what the operator sets; the secret is never shown back.
type Settings struct {
	Enabled  bool   `json:"enabled"`
	Name     string `json:"name"`
	Issuer   string `json:"issuer"`
	ClientID string `json:"client_id"`
	// HasSecret says a client secret is kept (it is never shown).
	HasSecret bool `json:"has_secret"`
	// Who may enter: any of these emails, any email under these domains,
	// or a member of any of these groups (GroupsClaim, default "groups").
	Emails      []string `json:"emails"`
	Domains     []string `json:"email_domains"`
	Groups      []string `json:"groups"`
	GroupsClaim string   `json:"groups_claim"`
}

// Input is PUT /api/auth/sso's body: Settings with the secret ("" keeps
// the one kept).
type Input struct {
	Settings
	ClientSecret string `json:"client_secret"`
}

type stored struct {
	Settings
	SecretSealed string `json:"client_secret_sealed"`
}

// InputError is a request the caller must change.
type InputError string

func (e InputError) Error() string { return string(e) }

// Refusal is a sign-in that did not happen: Code names why, among the
// fixed reasons of Reasons (the browser is sent back with the code alone,
// never free text), and Detail says it in full for the audit log: the
// identity and the provider's or the network's own words.
type Refusal struct {
	Code, Detail string
}

func (e *Refusal) Error() string { return e.Detail }

func refuse(code, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// The reasons a sign-in does not happen, as the login page says them.
const (
	ReasonOff          = "off"
	ReasonDown         = "provider_down"
	ReasonProviderSaid = "provider_refused"
	ReasonIncomplete   = "incomplete_answer"
	ReasonUnknownFlow  = "unknown_sign_in"
	ReasonCodeRefused  = "code_refused"
	ReasonTokenDown    = "token_endpoint_down"
	ReasonBadToken     = "bad_id_token"
	ReasonUnverified   = "email_unverified"
	ReasonNotAllowed   = "not_allowed"
	ReasonNoSite       = "no_sso_site"
	ReasonSiteGone     = "site_gone"
)

// Reasons are the fixed sentences of each reason: the only text a
// refused sign-in puts on a login page, whatever its URL says.
var Reasons = map[string]string{
	ReasonOff: "Single sign-on is off.",
	ReasonDown: "The identity provider did not answer. Check that it is up and that this server reaches " +
		"the issuer URL set in Security > Single sign-on; the audit log has the error.",
	ReasonProviderSaid: "The identity provider refused the sign-in; the audit log has its words.",
	ReasonIncomplete:   "The identity provider's answer was incomplete. Start the sign-in again.",
	ReasonUnknownFlow: "This sign-in is not known here: it expired, was already used, or was started in another browser. " +
		"Start it again from this browser.",
	ReasonCodeRefused: "The identity provider did not accept this sign-in's code. Check the client ID and secret in " +
		"Security > Single sign-on, and that the provider lists this dashboard's redirect URI; the audit log has its words.",
	ReasonTokenDown: "The identity provider's token endpoint did not answer, so the sign-in could not be completed. " +
		"Check that the provider is up and reachable from this server; the audit log has the error.",
	ReasonBadToken: "The identity provider's ID token did not verify. Check the issuer URL and the client ID in " +
		"Security > Single sign-on; the audit log has the reason.",
	ReasonUnverified: "The identity provider has not verified this account's email address, so it cannot sign in here. " +
		"Verify it at the provider, or use another account.",
	ReasonNotAllowed: "This account may not enter: it is not among the allowed emails, domains or groups.",
	ReasonNoSite:     "No site here signs in through single sign-on at that name.",
	ReasonSiteGone:   "The site this sign-in was for no longer signs in through single sign-on.",
}

// ReasonText is the sentence of code; an unknown code gets a fixed
// sentence too.
func ReasonText(code string) string {
	if t, ok := Reasons[code]; ok {
		return t
	}
	return "The sign-in did not happen. Start it again."
}

// Service runs the flows.
type Service struct {
	Store  *store.Store
	Sealer *seal.Sealer
	Now    func() time.Time
	// Client reaches the provider (nil: http.DefaultClient with a timeout).
	Client *http.Client

	mu   sync.Mutex
	prov cachedProvider
}

// ProviderTTL is how long the provider's configuration (and its key set,
// which go-oidc refreshes by itself when a token names a new key) is kept
// between sign-ins; a change of issuer takes effect at once.
const ProviderTTL = 10 * time.Minute

type cachedProvider struct {
	issuer string
	p      *oidc.Provider
	at     time.Time
}

// provider is issuer's configuration, asked again after ProviderTTL.
func (s *Service) provider(ctx context.Context, issuer string) (*oidc.Provider, error) {
	now := s.now()
	s.mu.Lock()
	c := s.prov
	s.mu.Unlock()
	if c.p != nil && c.issuer == issuer && now.Sub(c.at) < ProviderTTL {
		return c.p, nil
	}
	dctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, s.client()), DiscoveryTimeout)
	defer cancel()
	p, err := oidc.NewProvider(dctx, issuer)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.prov = cachedProvider{issuer: issuer, p: p, at: now}
	s.mu.Unlock()
	return p, nil
}

func (s *Service) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

func (s *Service) client() *http.Client {
	if s.Client != nil {
		return s.Client
	}
	return &http.Client{Timeout: DiscoveryTimeout}
}

var aad = []byte("sso:client_secret")

func (s *Service) load(ctx context.Context) (stored, error) {
	var st stored
	raw, err := s.Store.GetSetting(ctx, settingsKey)
	if errors.Is(err, store.ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal([]byte(raw), &st)
}

// Get returns the settings.
func (s *Service) Get(ctx context.Context) (Settings, error) {
	st, err := s.load(ctx)
	st.Settings.HasSecret = st.SecretSealed != ""
	st.Emails, st.Domains, st.Groups = clean(st.Emails, true), clean(st.Domains, true), clean(st.Groups, false)
	return st.Settings, err
}

func clean(list []string, lower bool) []string {
	out := []string{}
	for _, v := range list {
		v = strings.TrimSpace(v)
		if lower {
			v = strings.ToLower(v)
		}
		if v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// Put checks and saves the settings. Turning sign-in on asks the provider
// for its configuration first: an issuer that does not answer as an
// OpenID provider is refused in its own words.
func (s *Service) Put(ctx context.Context, in Input) (Settings, error) {
	old, err := s.load(ctx)
	if err != nil {
		return Settings{}, err
	}
	in.Name = strings.TrimSpace(in.Name)
	// Kept exactly as given: the issuer is compared character for
	// character with what the provider publishes, trailing slash and all.
	in.Issuer = strings.TrimSpace(in.Issuer)
	in.ClientID = strings.TrimSpace(in.ClientID)
	in.GroupsClaim = strings.TrimSpace(in.GroupsClaim)
	in.Emails, in.Domains, in.Groups = clean(in.Emails, true), clean(in.Domains, true), clean(in.Groups, false)
	for i, d := range in.Domains {
		in.Domains[i] = strings.TrimPrefix(d, "@")
	}
	if in.Name == "" {
		in.Name = "SSO"
	}
	if len(in.Name) > 40 {
		return Settings{}, InputError("name must be at most 40 characters")
	}
	next := stored{Settings: in.Settings, SecretSealed: old.SecretSealed}
	if in.ClientSecret != "" {
		next.SecretSealed = s.Sealer.Seal([]byte(in.ClientSecret), aad)
	}
	if in.Enabled {
		u, err := url.Parse(in.Issuer)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return Settings{}, InputError("issuer must be the provider's https URL (its /.well-known/openid-configuration answers there)")
		}
		if in.ClientID == "" {
			return Settings{}, InputError("client_id required")
		}
		if next.SecretSealed == "" {
			return Settings{}, InputError("client_secret required")
		}
		if len(in.Emails)+len(in.Domains)+len(in.Groups) == 0 {
			return Settings{}, InputError("say who may enter: emails, email_domains or groups")
		}
		// Asked afresh when the settings are saved.
		s.mu.Lock()
		s.prov = cachedProvider{}
		s.mu.Unlock()
		if _, err := s.provider(ctx, in.Issuer); err != nil {
			return Settings{}, InputError("the issuer does not answer as an OpenID provider: " + err.Error())
		}
	}
	raw, err := json.Marshal(next)
	if err != nil {
		return Settings{}, err
	}
	if err := s.Store.SetSetting(ctx, settingsKey, string(raw)); err != nil {
		return Settings{}, err
	}
	next.Settings.HasSecret = next.SecretSealed != ""
	return next.Settings, nil
}

func random() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func hashState(state string) string {
	h := sha256.Sum256([]byte(state))
	return hex.EncodeToString(h[:])
}

// config is the flow's configuration, asking the provider at use time.
func (s *Service) config(ctx context.Context, redirectURI string, extraScopes ...string) (*oidc.Provider, *oauth2.Config, stored, error) {
	st, err := s.load(ctx)
	if err != nil {
		return nil, nil, st, err
	}
	if !st.Enabled {
		return nil, nil, st, refuse(ReasonOff, "single sign-on is off")
	}
	secret, err := s.Sealer.Open(st.SecretSealed, aad)
	if err != nil {
		return nil, nil, st, fmt.Errorf("open the client secret: %w", err)
	}
	p, err := s.provider(ctx, st.Issuer)
	if err != nil {
		return nil, nil, st, refuse(ReasonDown, "the identity provider %s does not answer: %v", st.Issuer, err)
	}
	scopes := []string{oidc.ScopeOpenID, "email", "profile"}
	if len(st.Groups) > 0 {
		scopes = append(scopes, "groups")
	}
	for _, x := range extraScopes {
		if !slices.Contains(scopes, x) {
			scopes = append(scopes, x)
		}
	}
	return p, &oauth2.Config{ClientID: st.ClientID, ClientSecret: string(secret), Endpoint: p.Endpoint(),
		RedirectURL: redirectURI, Scopes: scopes}, st, nil
}

// Start begins a sign-in: the provider's authorization URL, with state,
// nonce and a PKCE challenge kept for the callback, and the binding: a
// secret the caller puts in a short-lived cookie of the browser that
// started it. The flow is found again only with both the state (which
// comes back in the URL) and the binding (which comes back in that
// cookie), so a callback URL redeemed in another browser is no session.
// extraScopes are asked besides the settings' (the groups scope, for a
// tunnel whose list names groups).
func (s *Service) Start(ctx context.Context, redirectURI, purpose, returnTo string, extraScopes ...string) (authURL, binding string, err error) {
	_, cfg, _, err := s.config(ctx, redirectURI, extraScopes...)
	if err != nil {
		return "", "", err
	}
	state, err := random()
	if err != nil {
		return "", "", err
	}
	nonce, err := random()
	if err != nil {
		return "", "", err
	}
	if binding, err = random(); err != nil {
		return "", "", err
	}
	verifier := oauth2.GenerateVerifier()
	now := s.now()
	if err := s.Store.PutOIDCFlow(ctx, store.OIDCFlow{StateHash: flowKey(state, binding), Nonce: nonce, Verifier: verifier,
		Purpose: purpose, ReturnTo: returnTo, ExpiresAt: now.Add(FlowTTL)}, now); err != nil {
		return "", "", err
	}
	return cfg.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), binding, nil
}

// flowKey is what a flow is stored under: its state and the binding of
// the browser that started it.
func flowKey(state, binding string) string { return hashState(state + "\x00" + binding) }

// Identity is who the provider says signed in.
type Identity struct {
	Subject, Email string
	Groups         []string
}

// Label names the identity for the audit log.
func (i Identity) Label() string {
	if i.Email != "" {
		return i.Email
	}
	return "subject " + i.Subject
}

// Callback ends a sign-in: the provider's answer (q) is checked (state
// and the browser's binding, code exchanged with the PKCE verifier, ID
// token and its nonce), then the identity: an email the provider has not
// verified is refused, and the dashboard's list decides who may enter. It
// returns the identity and the flow's purpose and return address. A
// *Refusal says why, by reason and in full.
func (s *Service) Callback(ctx context.Context, redirectURI, binding string, q url.Values) (Identity, store.OIDCFlow, error) {
	var id Identity
	if e := q.Get("error"); e != "" {
		why := e
		if d := q.Get("error_description"); d != "" {
			why = d + " (" + e + ")"
		}
		var flow store.OIDCFlow
		if st := q.Get("state"); st != "" && binding != "" {
			flow, _ = s.Store.TakeOIDCFlow(ctx, flowKey(st, binding), s.now())
		}
		return id, flow, refuse(ReasonProviderSaid, "the identity provider refused the sign-in: %s", why)
	}
	state, code := q.Get("state"), q.Get("code")
	if state == "" || code == "" {
		return id, store.OIDCFlow{}, refuse(ReasonIncomplete, "the provider's answer has no state or code")
	}
	if binding == "" {
		return id, store.OIDCFlow{}, refuse(ReasonUnknownFlow, "the sign-in's cookie did not come back: it was started in another browser, or the cookie expired")
	}
	flow, err := s.Store.TakeOIDCFlow(ctx, flowKey(state, binding), s.now())
	if errors.Is(err, store.ErrNotFound) {
		return id, flow, refuse(ReasonUnknownFlow, "this sign-in is not known here (expired, already used, or started in another browser)")
	}
	if err != nil {
		return id, flow, err
	}
	p, cfg, st, err := s.config(ctx, redirectURI)
	if err != nil {
		return id, flow, err
	}
	claims, subject, err := s.redeem(ctx, p, cfg, code, flow)
	if err != nil {
		return id, flow, err
	}
	if id, err = identityOf(claims, subject, st); err != nil {
		return id, flow, err
	}
	// The dashboard's own list; a gate's flow is checked against its
	// tunnel's list by the gate.
	if flow.Purpose == PurposeDashboard && !allowed(st.Settings, id) {
		return id, flow, refuse(ReasonNotAllowed, "%s may not enter this dashboard: it is not among the allowed emails, domains or groups", id.Label())
	}
	return id, flow, nil
}

// redeem exchanges the code for tokens (with the flow's PKCE verifier),
// verifies the ID token and its nonce, and returns its claims with the
// UserInfo answer's added, and its subject.
func (s *Service) redeem(ctx context.Context, p *oidc.Provider, cfg *oauth2.Config, code string, flow store.OIDCFlow) (map[string]any, string, error) {
	xctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, s.client()), DiscoveryTimeout)
	defer cancel()
	tok, err := cfg.Exchange(xctx, code, oauth2.VerifierOption(flow.Verifier))
	var said *oauth2.RetrieveError
	if errors.As(err, &said) {
		return nil, "", refuse(ReasonCodeRefused, "the identity provider did not accept the sign-in's code: %v", err)
	}
	if err != nil {
		return nil, "", refuse(ReasonTokenDown, "the identity provider's token endpoint did not answer: %v", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, "", refuse(ReasonIncomplete, "the identity provider sent no ID token")
	}
	idt, err := p.Verifier(&oidc.Config{ClientID: cfg.ClientID}).Verify(xctx, raw)
	if err != nil {
		return nil, "", refuse(ReasonBadToken, "the ID token does not verify: %v", err)
	}
	if idt.Nonce != flow.Nonce {
		return nil, "", refuse(ReasonBadToken, "the ID token's nonce is not this sign-in's")
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return nil, "", refuse(ReasonBadToken, "the ID token's claims do not parse: %v", err)
	}
	// Providers that follow the specification to the letter put the
	// scopes' claims (email, groups) in the UserInfo answer, not the ID
	// token: ask it when the token has none, for the same subject.
	if _, ok := claims["email"]; !ok {
		if ui, err := p.UserInfo(xctx, oauth2.StaticTokenSource(tok)); err == nil && ui.Subject == idt.Subject {
			var more map[string]any
			if ui.Claims(&more) == nil {
				for k, v := range more {
					if _, have := claims[k]; !have {
						claims[k] = v
					}
				}
			}
		}
	}
	return claims, idt.Subject, nil
}

// identityOf reads who signed in from the provider's claims. An email
// counts only when the provider says it verified it: email_verified true,
// as a boolean or the string "true". An absent claim, false, "false" or
// anything else is refused, whatever the allow-lists say.
func identityOf(claims map[string]any, subject string, st stored) (Identity, error) {
	id := Identity{Subject: subject}
	if e, ok := claims["email"].(string); ok && e != "" {
		id.Email = strings.ToLower(e)
		if !verified(claims["email_verified"]) {
			return id, refuse(ReasonUnverified, "%s is not verified by %s", id.Email, providerName(st.Settings))
		}
	}
	gc := st.GroupsClaim
	if gc == "" {
		gc = "groups"
	}
	if gs, ok := claims[gc].([]any); ok {
		for _, g := range gs {
			if s, ok := g.(string); ok {
				id.Groups = append(id.Groups, s)
			}
		}
	}
	return id, nil
}

// verified says whether an email_verified claim says yes.
func verified(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
}

// providerName names the provider in a refusal: the name the operator
// gave it, and its issuer.
func providerName(st Settings) string {
	if st.Name == "" || st.Name == "SSO" {
		return st.Issuer
	}
	return st.Name + " (" + st.Issuer + ")"
}

// allowed says whether id may enter under st.
func allowed(st Settings, id Identity) bool {
	if id.Email != "" {
		if slices.Contains(st.Emails, id.Email) {
			return true
		}
		if at := strings.LastIndex(id.Email, "@"); at >= 0 && slices.Contains(st.Domains, id.Email[at+1:]) {
			return true
		}
	}
	for _, g := range id.Groups {
		if slices.Contains(st.Groups, g) {
			return true
		}
	}
	return false
}
