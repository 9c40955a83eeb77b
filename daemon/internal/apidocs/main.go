// Command apidocs writes the tables the docs take from the code (make
// docs): the route table's access rules into docs/api.md, and which
// setting describes one edge and which the cluster into docs/edges.md.
//
//	go run ./daemon/internal/apidocs docs
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tunnelsvc/tunnelsvc/daemon/api"
	"github.com/tunnelsvc/tunnelsvc/daemon/localsetup"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: apidocs DOCS-DIR")
		os.Exit(2)
	}
	for file, with := range map[string]func(string) (string, bool){
		"api.md":   api.WithAccessTable,
		"edges.md": localsetup.WithScopesTable,
	} {
		path := filepath.Join(os.Args[1], file)
		doc, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "apidocs:", err)
			os.Exit(1)
		}
		out, ok := with(string(doc))
		if !ok {
			fmt.Fprintf(os.Stderr, "apidocs: %s has no markers for its generated table\n", path)
			os.Exit(1)
		}
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "apidocs:", err)
			os.Exit(1)
		}
	}
}
