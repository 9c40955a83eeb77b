// Package tunnelsvc embeds the files the daemon serves: the built dashboard
// (ui/dist) and the scripts machines download. It imports nothing from the
// repository.
package tunnelsvc

import (
	"embed"
	"io/fs"
)

//go:embed all:ui/dist
var uiFiles embed.FS

// UI returns the built dashboard. When the UI was not built it holds only a
// placeholder, and the daemon serves a page saying so.
func UI() fs.FS {
	sub, err := fs.Sub(uiFiles, "ui/dist")
	if err != nil {
		panic(err)
	}
	return sub
}

//go:embed scripts/bootstrap.sh
var bootstrapScript []byte

//go:embed scripts/tunnel-uninstall.sh
var uninstallScript []byte

// BootstrapScript is scripts/bootstrap.sh, served at /static/bootstrap.sh
// with {base_url} substituted.
func BootstrapScript() []byte { return bootstrapScript }

// UninstallScript is scripts/tunnel-uninstall.sh, served at
// /static/tunnel-uninstall.sh.
func UninstallScript() []byte { return uninstallScript }
