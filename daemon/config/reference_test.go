package config

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// docs/configuration.md is exactly what the binary's own flag registration
// generates: a flag added, renamed or given a new default without
// `make docs` fails here.
func TestReferenceMatchesDocs(t *testing.T) {
	var want bytes.Buffer
	if err := WriteReference(&want); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "docs", "configuration.md")
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `make docs`)", err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("%s is out of date with daemon/config: run `make docs`\n--- generated:\n%s", path, want.String())
	}
	for _, f := range Flags {
		if !bytes.Contains(got, []byte("`--"+f.Name+"`")) || !bytes.Contains(got, []byte("`"+f.Env+"`")) {
			t.Fatalf("%s does not name --%s / %s", path, f.Name, f.Env)
		}
	}
}

// The page shows built-in defaults, not this machine's environment.
func TestReferenceIgnoresEnvironment(t *testing.T) {
	t.Setenv("TUNNELSVC_LISTEN", "0.0.0.0:1")
	var b bytes.Buffer
	if err := WriteReference(&b); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b.Bytes(), []byte("0.0.0.0:1")) || !bytes.Contains(b.Bytes(), []byte("`127.0.0.1:7380`")) {
		t.Fatalf("the environment leaked into the reference:\n%s", b.String())
	}
}
