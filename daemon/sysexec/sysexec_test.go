package sysexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunKeepsToolWords(t *testing.T) {
	_, err := Exec{}.Run(context.Background(), "sh", "-c", "echo 'bad thing on line 3' >&2; exit 2")
	var te *ToolError
	if !errors.As(err, &te) || te.Error() != "sh: bad thing on line 3" {
		t.Fatalf("err = %v", err)
	}
	_, err = Exec{}.Run(context.Background(), "/nonexistent/tool")
	if err == nil || !strings.Contains(err.Error(), "is not installed") {
		t.Fatalf("missing tool: %v", err)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	p := filepath.Join(t.TempDir(), "etc", "x.conf")
	if err := WriteFileAtomic(p, []byte("one"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(p, []byte("two"), 0o640); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	entries, _ := os.ReadDir(filepath.Dir(p))
	if string(b) != "two" || st.Mode().Perm() != 0o640 || len(entries) != 1 {
		t.Fatalf("content %q mode %v files %d", b, st.Mode().Perm(), len(entries))
	}
}
