// Package seal encrypts secrets at rest (TOTP secrets, SSH private keys,
// machine credentials) with AES-256-GCM under a key kept in a 0600 file
// beside the database, so a copied database alone reveals none of them.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KeyFile is the key's file name in the data directory.
const KeyFile = "secret.key"

// prefix versions the sealed format so the key or cipher can change later.
const prefix = "v1:"

// Sealer seals and opens secrets.
type Sealer struct {
	aead cipher.AEAD
}

// LoadOrCreate reads the key file in dataDir, creating it (0600) on first
// start. A key file with other permissions bits for group or others is
// refused: the key would be readable by someone other than the daemon.
func LoadOrCreate(dataDir string) (*Sealer, error) {
	path := filepath.Join(dataDir, KeyFile)
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err = create(path)
	}
	if err != nil {
		return nil, fmt.Errorf("secret key %s: %w", path, err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secret key %s has mode %v; it must be 0600", path, st.Mode().Perm())
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("secret key %s: want 32 bytes, have %d", path, len(key))
	}
	return New(key)
}

func create(path string) ([]byte, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return os.ReadFile(path) // another process won the race
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(key); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	return key, f.Close()
}

// New returns a Sealer for a 32-byte key.
func New(key []byte) (*Sealer, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// Seal encrypts plaintext. aad binds the ciphertext to its place (for
// example "totp:<device id>"), so a sealed value copied into another row
// does not open there.
func (s *Sealer) Seal(plaintext, aad []byte) string {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	out := s.aead.Seal(nonce, nonce, plaintext, aad)
	return prefix + base64.RawStdEncoding.EncodeToString(out)
}

// Open decrypts a value made by Seal with the same aad.
func (s *Sealer) Open(sealed string, aad []byte) ([]byte, error) {
	if !strings.HasPrefix(sealed, prefix) {
		return nil, errors.New("sealed value: unknown format")
	}
	raw, err := base64.RawStdEncoding.DecodeString(sealed[len(prefix):])
	if err != nil || len(raw) < s.aead.NonceSize() {
		return nil, errors.New("sealed value: malformed")
	}
	n := s.aead.NonceSize()
	pt, err := s.aead.Open(nil, raw[:n], raw[n:], aad)
	if err != nil {
		return nil, errors.New("sealed value: does not open with this key (wrong key file or tampered value)")
	}
	return pt, nil
}
