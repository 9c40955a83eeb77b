package seal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRoundTripAndKeyFile(t *testing.T) {
	dir := t.TempDir()
	s, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", st.Mode().Perm(), err)
	}
	sealed := s.Seal([]byte("JBSWY3DPEHPK3PXP"), []byte("totp:1"))
	if strings.Contains(sealed, "JBSWY3DPEHPK3PXP") {
		t.Fatal("sealed value contains the plaintext")
	}
	// A second load reads the same key.
	s2, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := s2.Open(sealed, []byte("totp:1"))
	if err != nil || string(pt) != "JBSWY3DPEHPK3PXP" {
		t.Fatalf("open = %q, %v", pt, err)
	}
	if _, err := s2.Open(sealed, []byte("totp:2")); err == nil {
		t.Fatal("opened with the wrong aad")
	}
	other, _ := LoadOrCreate(t.TempDir())
	if _, err := other.Open(sealed, []byte("totp:1")); err == nil {
		t.Fatal("opened with another key")
	}
}

func TestLooseKeyFileRefused(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadOrCreate(dir); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(dir, KeyFile), 0o644)
	if _, err := LoadOrCreate(dir); err == nil || !strings.Contains(err.Error(), "0600") {
		t.Fatalf("loose key accepted: %v", err)
	}
}
