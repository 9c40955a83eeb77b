package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "etc", "x.conf")
	if err := Write(p, []byte("one"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("two"), 0o640); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	entries, _ := os.ReadDir(filepath.Dir(p))
	if string(b) != "two" || st.Mode().Perm() != 0o640 || len(entries) != 1 {
		t.Fatalf("content %q mode %v files %d", b, st.Mode().Perm(), len(entries))
	}
}

func TestTempBeside(t *testing.T) {
	p := filepath.Join(t.TempDir(), "Caddyfile")
	tmp, err := TempBeside(p, []byte("x"))
	if err != nil || filepath.Dir(tmp) != filepath.Dir(p) {
		t.Fatalf("%q %v", tmp, err)
	}
	if b, _ := os.ReadFile(tmp); string(b) != "x" {
		t.Fatal(string(b))
	}
}
