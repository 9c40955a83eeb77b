package sshkeys

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/tunnelsvc/tunnelsvc/daemon/audit"
	"github.com/tunnelsvc/tunnelsvc/daemon/auth"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

func newService(t *testing.T) (*Service, *store.Store) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sealer, err := seal.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	now := func() time.Time { return time.Unix(1_800_000_000, 0) }
	rec := &audit.Recorder{Store: st, Log: log, Now: now}
	return New(Options{Store: st, Sealer: sealer, Audit: rec, Log: log, Now: now}), st
}

// checkPair opens key k's private half and checks that it parses and that
// its public half is k's public key and fingerprint.
func checkPair(t *testing.T, s *Service, k Key, wantType string) {
	t.Helper()
	pemText, err := s.privateKey(context.Background(), k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(pemText), "-----BEGIN OPENSSH PRIVATE KEY-----") {
		t.Fatalf("private key is not in OpenSSH format: %.40q", pemText)
	}
	signer, err := ssh.ParsePrivateKey(pemText)
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k.PublicKey))
	if err != nil {
		t.Fatalf("public key %q: %v", k.PublicKey, err)
	}
	if string(signer.PublicKey().Marshal()) != string(pub.Marshal()) || ssh.FingerprintSHA256(pub) != k.Fingerprint {
		t.Fatal("private and public halves do not match")
	}
	if pub.Type() != wantType || !strings.HasPrefix(k.Fingerprint, "SHA256:") {
		t.Fatalf("type %s fingerprint %s", pub.Type(), k.Fingerprint)
	}
}

func TestGenerate(t *testing.T) {
	s, st := newService(t)
	ctx := context.Background()
	ed, err := s.Generate(ctx, auth.Client{}, GenerateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ed.Name != "Unnamed key" || !ed.IsDefault || ed.MachineCount != 0 {
		t.Fatalf("first key %+v", ed)
	}
	checkPair(t, s, ed, ssh.KeyAlgoED25519)
	rk, err := s.Generate(ctx, auth.Client{}, GenerateRequest{Name: " big ", Type: "rsa"})
	if err != nil {
		t.Fatal(err)
	}
	if rk.Name != "big" || rk.IsDefault {
		t.Fatalf("second key %+v", rk)
	}
	checkPair(t, s, rk, ssh.KeyAlgoRSA)
	pemText, _ := s.privateKey(ctx, rk.ID)
	signer, _ := ssh.ParsePrivateKey(pemText)
	if n := signer.PublicKey().(ssh.CryptoPublicKey).CryptoPublicKey().(*rsa.PublicKey).N.BitLen(); n != 3072 {
		t.Fatalf("RSA key has %d bits", n)
	}
	if _, err := s.Generate(ctx, auth.Client{}, GenerateRequest{Type: "dsa"}); !errors.Is(err, ErrBadType) {
		t.Fatalf("type dsa: %v", err)
	}
	if _, err := s.Generate(ctx, auth.Client{}, GenerateRequest{Name: strings.Repeat("x", 101)}); !errors.Is(err, ErrNameTooLong) {
		t.Fatalf("long name: %v", err)
	}
	// Sealed at rest: no row holds private key text.
	var n int
	st.DB().QueryRow("SELECT COUNT(*) FROM ssh_keys WHERE private_sealed LIKE '%PRIVATE KEY%' OR private_sealed NOT LIKE 'v1:%'").Scan(&n)
	if n != 0 {
		t.Fatalf("%d rows hold an unsealed private key", n)
	}
}

func pemOf(t *testing.T, typ string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

func authorizedLine(t *testing.T, pub any) string {
	t.Helper()
	p, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(p))) + " me@laptop"
}

func TestUpload(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	edPub, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	block, _ := ssh.MarshalPrivateKey(edPriv, "x")
	openssh := string(pem.EncodeToMemory(block))
	encBlock, _ := ssh.MarshalPrivateKeyWithPassphrase(edPriv, "x", []byte("secret"))
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	smallRSA, _ := rsa.GenerateKey(rand.Reader, 1024)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalECPrivateKey(ecKey)
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(edPriv)

	bad := []struct {
		name string
		req  UploadRequest
		want string
	}{
		{"no private", UploadRequest{PublicKey: authorizedLine(t, edPub)}, "private_key and public_key are required"},
		{"no public", UploadRequest{PrivateKey: openssh, PublicKey: "  "}, "private_key and public_key are required"},
		{"mismatch", UploadRequest{PrivateKey: openssh, PublicKey: authorizedLine(t, otherPub)}, "private_key and public_key do not match"},
		{"encrypted", UploadRequest{PrivateKey: string(pem.EncodeToMemory(encBlock)), PublicKey: authorizedLine(t, edPub)}, ErrEncrypted.Error()},
		{"not pem", UploadRequest{PrivateKey: "hello", PublicKey: authorizedLine(t, edPub)}, "private_key is not in PEM or OpenSSH format (it should begin with a -----BEGIN line)"},
		{"garbled pem", UploadRequest{PrivateKey: pemOf(t, "RSA PRIVATE KEY", []byte("junk")), PublicKey: authorizedLine(t, edPub)}, ""},
		{"bad public", UploadRequest{PrivateKey: openssh, PublicKey: "ssh-ed25519 !!!"}, ""},
		{"small rsa", UploadRequest{PrivateKey: pemOf(t, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(smallRSA)), PublicKey: authorizedLine(t, &smallRSA.PublicKey)},
			"private_key: RSA keys must have at least 2048 bits, this one has 1024"},
	}
	for _, c := range bad {
		_, err := s.Upload(ctx, auth.Client{}, c.req)
		var ke *Error
		if !errors.As(err, &ke) || (c.want != "" && err.Error() != c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	if keys, _ := s.List(ctx); len(keys) != 0 {
		t.Fatalf("refused uploads stored %d keys", len(keys))
	}

	good := []struct {
		name, typ string
		req       UploadRequest
	}{
		{"openssh ed25519", ssh.KeyAlgoED25519, UploadRequest{PrivateKey: openssh, PublicKey: authorizedLine(t, edPub)}},
		{"pkcs8 ed25519", ssh.KeyAlgoED25519, UploadRequest{PrivateKey: pemOf(t, "PRIVATE KEY", pkcs8), PublicKey: authorizedLine(t, edPub), Name: "again"}},
		{"pkcs1 rsa", ssh.KeyAlgoRSA, UploadRequest{PrivateKey: pemOf(t, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey)), PublicKey: authorizedLine(t, &rsaKey.PublicKey), SetDefault: true}},
		{"sec1 ecdsa", ssh.KeyAlgoECDSA256, UploadRequest{PrivateKey: pemOf(t, "EC PRIVATE KEY", ecDER), PublicKey: authorizedLine(t, &ecKey.PublicKey)}},
	}
	for i, c := range good {
		k, err := s.Upload(ctx, auth.Client{}, c.req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		wantName := c.req.Name
		if wantName == "" {
			wantName = "Uploaded key"
		}
		if k.Name != wantName || k.IsDefault != (i == 0 || c.req.SetDefault) {
			t.Errorf("%s: %+v", c.name, k)
		}
		checkPair(t, s, k, c.typ)
	}
}

func TestDefaultAlwaysOne(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	c := auth.Client{}
	a, _ := s.Generate(ctx, c, GenerateRequest{Name: "a"})
	b, _ := s.Generate(ctx, c, GenerateRequest{Name: "b"})
	cc, _ := s.Generate(ctx, c, GenerateRequest{Name: "c", SetDefault: true})
	defaults := func() string {
		keys, _ := s.List(ctx)
		var ds []string
		for _, k := range keys {
			if k.IsDefault {
				ds = append(ds, k.Name)
			}
		}
		return strings.Join(ds, ",")
	}
	if d := defaults(); d != "c" {
		t.Fatalf("defaults = %q, want c", d)
	}
	if err := s.Delete(ctx, c, cc.ID); !errors.Is(err, ErrDefaultKey) {
		t.Fatalf("delete default: %v", err)
	}
	if err := s.SetDefault(ctx, c, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("default of unknown: %v", err)
	}
	if err := s.Delete(ctx, c, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete unknown: %v", err)
	}
	if err := s.SetDefault(ctx, c, a.ID); err != nil || defaults() != "a" {
		t.Fatalf("set default a: %v, %q", err, defaults())
	}
	for _, id := range []string{b.ID, cc.ID, a.ID} {
		if err := s.Delete(ctx, c, id); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
	}
	if keys, _ := s.List(ctx); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

func TestEnsureDefault(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	ids := make([]string, 4)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := s.EnsureDefault(ctx)
			if err != nil {
				t.Error(err)
			}
			ids[i] = k.ID
		}()
	}
	wg.Wait()
	keys, _ := s.List(ctx)
	if len(keys) != 1 || !keys[0].IsDefault || keys[0].Name != "Default key" {
		t.Fatalf("keys after concurrent EnsureDefault: %+v", keys)
	}
	for _, id := range ids {
		if id != keys[0].ID {
			t.Fatalf("EnsureDefault returned %v", ids)
		}
	}
	line, err := s.DefaultPublicKey(ctx)
	if err != nil || line != keys[0].PublicKey || !strings.HasSuffix(line, " tunnelsvc") {
		t.Fatalf("DefaultPublicKey = %q, %v", line, err)
	}
	signer, err := s.DefaultSigner(ctx)
	if err != nil || ssh.FingerprintSHA256(signer.PublicKey()) != keys[0].Fingerprint {
		t.Fatalf("DefaultSigner: %v", err)
	}
}
