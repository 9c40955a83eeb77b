// Command apidocs writes the route table's access rules into docs/api.md,
// between its markers (make docs): go run ./daemon/internal/apidocs docs/api.md
package main

import (
	"fmt"
	"os"

	"github.com/tunnelsvc/tunnelsvc/daemon/api"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: apidocs docs/api.md")
		os.Exit(2)
	}
	doc, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "apidocs:", err)
		os.Exit(1)
	}
	out, ok := api.WithAccessTable(string(doc))
	if !ok {
		fmt.Fprintf(os.Stderr, "apidocs: %s has no access table markers\n", os.Args[1])
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[1], []byte(out), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "apidocs:", err)
		os.Exit(1)
	}
}
