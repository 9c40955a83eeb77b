// Package sshkeys manages the server's own SSH key pairs: the default key's
// public half is what machines trust at bootstrap, its private half is what
// the daemon and the operator use to reach machines through their tunnels.
// Private keys are sealed at rest and leave only through Download.
package sshkeys

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/crypto/ssh"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// Audit event kinds of this package.
const (
	KindDownloaded = "SSH_KEY_DOWNLOADED"
	KindAdded      = "SSH_KEY_ADDED"
	KindDeleted    = "SSH_KEY_DELETED"
	KindDefaultSet = "SSH_KEY_DEFAULT_SET"
)

// Key types Generate makes.
const (
	TypeEd25519 = "ed25519"
	TypeRSA     = "rsa"
	rsaBits     = 3072
	// minRSABits refuses uploads of RSA keys that OpenSSH itself refuses.
	minRSABits = 2048
)

// Default names (spec §4.2).
const (
	generatedName = "Unnamed key"
	uploadedName  = "Uploaded key"
	ensuredName   = "Default key"
	maxNameRunes  = 100
	// comment ends the public key line machines add to authorized_keys, so
	// the operator can tell which entry is ours.
	comment = "tunnelsvc"
)

// Error is a failure the operator caused; its text is what the API answers.
type Error struct{ msg string }

func (e *Error) Error() string { return e.msg }

func errorf(format string, args ...any) *Error { return &Error{fmt.Sprintf(format, args...)} }

// The operator-facing failures.
var (
	ErrNotFound     = &Error{"key not found"}
	ErrKeysRequired = &Error{"private_key and public_key are required"}
	ErrBadType      = &Error{"type must be ed25519 or rsa"}
	ErrDefaultKey   = &Error{"this is the default key: make another key the default before deleting it"}
	ErrNameTooLong  = &Error{fmt.Sprintf("name must be at most %d characters", maxNameRunes)}
	ErrNameControl  = &Error{"name must not contain control characters"}
	ErrEncrypted    = &Error{`private_key is encrypted: remove its passphrase first (ssh-keygen -p -N "" -f KEYFILE)`}
	ErrMismatch     = &Error{"private_key and public_key do not match"}
)

// Key is a key record as the API shows it: never any private material.
type Key struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	PublicKey    string    `json:"public_key"`
	Fingerprint  string    `json:"fingerprint"`
	IsDefault    bool      `json:"is_default"`
	CreatedAt    time.Time `json:"created_at"`
	MachineCount int       `json:"machine_count"`
}

func fromStore(k store.SSHKey) Key {
	return Key{ID: k.ID, Name: k.Name, PublicKey: k.PublicKey, Fingerprint: k.Fingerprint,
		IsDefault: k.IsDefault, CreatedAt: k.CreatedAt, MachineCount: k.MachineCount}
}

// Options are the Service's dependencies; Log and Now default when nil.
type Options struct {
	Store  *store.Store
	Sealer *seal.Sealer
	Audit  *audit.Recorder
	Log    *slog.Logger
	Now    func() time.Time
}

// Service manages the key pairs.
type Service struct {
	st     *store.Store
	sealer *seal.Sealer
	audit  *audit.Recorder
	log    *slog.Logger
	now    func() time.Time
	// ensureMu makes EnsureDefault generate one key when two machines
	// register at once.
	ensureMu sync.Mutex
}

// New returns a Service.
func New(o Options) *Service {
	s := &Service{st: o.Store, sealer: o.Sealer, audit: o.Audit, log: o.Log, now: o.Now}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

func aad(id string) []byte { return []byte("sshkey:" + id) }

// List returns every key, oldest first.
func (s *Service) List(ctx context.Context) ([]Key, error) {
	ks, err := s.st.ListSSHKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Key, 0, len(ks))
	for _, k := range ks {
		out = append(out, fromStore(k))
	}
	return out, nil
}

// Get returns key id, or ErrNotFound.
func (s *Service) Get(ctx context.Context, id string) (Key, error) {
	k, err := s.st.GetSSHKey(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Key{}, ErrNotFound
	}
	return fromStore(k), err
}

// GenerateRequest is the generate body.
type GenerateRequest struct {
	Name       string `json:"name"`
	SetDefault bool   `json:"set_default"`
	Type       string `json:"type"`
}

// Generate makes a new key pair (ed25519 unless Type is "rsa", then 3072
// bits) and stores it.
func (s *Service) Generate(ctx context.Context, c auth.Client, r GenerateRequest) (Key, error) {
	name, err := cleanName(r.Name, generatedName)
	if err != nil {
		return Key{}, err
	}
	var priv crypto.Signer
	switch strings.ToLower(strings.TrimSpace(r.Type)) {
	case "", TypeEd25519:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	case TypeRSA:
		priv, err = rsa.GenerateKey(rand.Reader, rsaBits)
	default:
		return Key{}, ErrBadType
	}
	if err != nil {
		return Key{}, err
	}
	return s.store(ctx, c, name, priv, r.SetDefault, "generated")
}

// UploadRequest is the upload body.
type UploadRequest struct {
	Name       string `json:"name"`
	PrivateKey string `json:"private_key"`
	PublicKey  string `json:"public_key"`
	SetDefault bool   `json:"set_default"`
}

// Upload stores an existing pair after checking that the private key (OpenSSH
// or PEM, unencrypted) parses and matches the public key line.
func (s *Service) Upload(ctx context.Context, c auth.Client, r UploadRequest) (Key, error) {
	if strings.TrimSpace(r.PrivateKey) == "" || strings.TrimSpace(r.PublicKey) == "" {
		return Key{}, ErrKeysRequired
	}
	name, err := cleanName(r.Name, uploadedName)
	if err != nil {
		return Key{}, err
	}
	priv, err := ParsePrivateKey([]byte(r.PrivateKey))
	if err != nil {
		return Key{}, err
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(strings.TrimSpace(r.PublicKey)))
	if err != nil {
		return Key{}, errorf("public_key is not an OpenSSH public key line (like \"ssh-ed25519 AAAA... comment\"): %v", strings.TrimPrefix(err.Error(), "ssh: "))
	}
	signer, err := ssh.NewSignerFromSigner(priv)
	if err != nil {
		return Key{}, errorf("private_key: %v", err)
	}
	if !bytes.Equal(signer.PublicKey().Marshal(), pub.Marshal()) {
		return Key{}, ErrMismatch
	}
	return s.store(ctx, c, name, priv, r.SetDefault, "uploaded")
}

// ParsePrivateKey reads an unencrypted private key in OpenSSH or PEM
// (PKCS#1, PKCS#8, SEC 1) format: ed25519, RSA of 2048 bits or more, or
// ECDSA. Its errors are *Error with the reason.
func ParsePrivateKey(pemBytes []byte) (crypto.Signer, error) {
	pemBytes = bytes.TrimSpace(pemBytes)
	if block, _ := pem.Decode(pemBytes); block == nil {
		return nil, errorf("private_key is not in PEM or OpenSSH format (it should begin with a -----BEGIN line)")
	}
	raw, err := ssh.ParseRawPrivateKey(pemBytes)
	var missing *ssh.PassphraseMissingError
	if errors.As(err, &missing) {
		return nil, ErrEncrypted
	}
	if err != nil {
		return nil, errorf("private_key does not parse: %v", strings.TrimPrefix(err.Error(), "ssh: "))
	}
	switch k := raw.(type) {
	case *rsa.PrivateKey:
		if k.N.BitLen() < minRSABits {
			return nil, errorf("private_key: RSA keys must have at least %d bits, this one has %d", minRSABits, k.N.BitLen())
		}
		return k, nil
	case *ed25519.PrivateKey:
		return *k, nil
	case ed25519.PrivateKey:
		return k, nil
	case *ecdsa.PrivateKey:
		return k, nil
	}
	return nil, errorf("private_key: unsupported key type %T (use ed25519, RSA or ECDSA)", raw)
}

func (s *Service) store(ctx context.Context, c auth.Client, name string, priv crypto.Signer, makeDefault bool, how string) (Key, error) {
	signer, err := ssh.NewSignerFromSigner(priv)
	if err != nil {
		return Key{}, err
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return Key{}, err
	}
	id, err := newID()
	if err != nil {
		return Key{}, err
	}
	pub := signer.PublicKey()
	k := store.SSHKey{
		ID: id, Name: name, Type: pub.Type(),
		PublicKey:     strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))) + " " + comment,
		Fingerprint:   ssh.FingerprintSHA256(pub),
		PrivateSealed: s.sealer.Seal(pem.EncodeToMemory(block), aad(id)),
		CreatedAt:     s.now().UTC().Truncate(time.Second),
	}
	if k.IsDefault, err = s.st.InsertSSHKey(ctx, k, makeDefault); err != nil {
		return Key{}, err
	}
	s.record(ctx, c, KindAdded, fmt.Sprintf("key %s (%s, %s) %s", id, name, k.Fingerprint, how))
	return fromStore(k), nil
}

func newID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func cleanName(name, def string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return def, nil
	}
	if utf8.RuneCountInString(name) > maxNameRunes {
		return "", ErrNameTooLong
	}
	if strings.ContainsFunc(name, unicode.IsControl) {
		return "", ErrNameControl
	}
	return name, nil
}

// SetDefault makes key id the default.
func (s *Service) SetDefault(ctx context.Context, c auth.Client, id string) error {
	label := s.label(ctx, id)
	err := s.st.SetDefaultSSHKey(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return ErrNotFound
	}
	if err == nil {
		s.record(ctx, c, KindDefaultSet, label+" made the default")
	}
	return err
}

// Delete removes key id; the default only when it is the last key.
func (s *Service) Delete(ctx context.Context, c auth.Client, id string) error {
	label := s.label(ctx, id)
	err := s.st.DeleteSSHKey(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return ErrNotFound
	case errors.Is(err, store.ErrDefaultKey):
		return ErrDefaultKey
	case err != nil:
		return err
	}
	s.record(ctx, c, KindDeleted, label+" deleted")
	return nil
}

// label names key id for the audit log by its name, keeping the id (spec
// §6: the download entry carries the key identifier).
func (s *Service) label(ctx context.Context, id string) string {
	if k, err := s.st.GetSSHKey(ctx, id); err == nil {
		return fmt.Sprintf("key %q (%s)", k.Name, id)
	}
	return "key " + id
}

// privateKey opens key id's private key (OpenSSH PEM text).
func (s *Service) privateKey(ctx context.Context, id string) ([]byte, error) {
	k, err := s.st.GetSSHKey(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return s.sealer.Open(k.PrivateSealed, aad(id))
}

// Download returns key id's private key in OpenSSH format and audits it.
// The caller has checked the step-up challenge first.
func (s *Service) Download(ctx context.Context, c auth.Client, id string) ([]byte, error) {
	pemText, err := s.privateKey(ctx, id)
	if err != nil {
		return nil, err
	}
	s.record(ctx, c, KindDownloaded, s.label(ctx, id)+" downloaded")
	return pemText, nil
}

// EnsureDefault returns the default key, generating an ed25519 key that
// becomes the default when there is none (the first machine registration).
func (s *Service) EnsureDefault(ctx context.Context) (Key, error) {
	s.ensureMu.Lock()
	defer s.ensureMu.Unlock()
	k, err := s.st.DefaultSSHKey(ctx)
	if err == nil {
		return fromStore(k), nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return Key{}, err
	}
	return s.Generate(ctx, auth.Client{}, GenerateRequest{Name: ensuredName, SetDefault: true})
}

// DefaultPublicKey is the authorized_keys line machines add at bootstrap;
// it makes a default key first if there is none.
func (s *Service) DefaultPublicKey(ctx context.Context) (string, error) {
	k, err := s.EnsureDefault(ctx)
	return k.PublicKey, err
}

// DefaultKey is the default key's id and public half (it makes a default
// key first if there is none); registration records the id per machine.
func (s *Service) DefaultKey(ctx context.Context) (id, publicKey string, err error) {
	k, err := s.EnsureDefault(ctx)
	return k.ID, k.PublicKey, err
}

// DefaultSigner is the default key's private half, for the daemon's own SSH
// connections to machines; it makes a default key first if there is none.
func (s *Service) DefaultSigner(ctx context.Context) (ssh.Signer, error) {
	k, err := s.EnsureDefault(ctx)
	if err != nil {
		return nil, err
	}
	pemText, err := s.privateKey(ctx, k.ID)
	if err != nil {
		return nil, err
	}
	return ssh.ParsePrivateKey(pemText)
}

func (s *Service) record(ctx context.Context, c auth.Client, kind, detail string) {
	s.audit.Record(ctx, audit.Event{Kind: kind, Client: c.Addr, UserAgent: c.UserAgent, Detail: detail})
}
