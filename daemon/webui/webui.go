// Package webui serves the embedded single-page dashboard: hashed assets with
// a long cache, index.html (never cached) for every other path, and a
// strict Content-Security-Policy.
package webui

import (
	"bytes"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// csp allows only our own scripts, styles and connections (including the
// log WebSocket) and data: images for the QR codes.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// notBuilt is served when the binary was built without the UI.
const notBuilt = `<!doctype html><html><head><meta charset="utf-8"><title>tunnelsvc</title></head>
<body><h1>tunnelsvc</h1><p>The dashboard UI is not built into this binary yet.
Run <code>make build</code> (which runs <code>make ui</code>) and restart the daemon.
The API is served under <a href="/api/openapi.yaml">/api/</a>.</p></body></html>`

// Handler serves files from dist (the contents of ui/dist).
func Handler(dist fs.FS) http.Handler {
	index, err := fs.ReadFile(dist, "index.html")
	if err != nil {
		index = []byte(notBuilt)
	}
	files := http.FileServerFS(dist)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(path.Clean(r.URL.Path), "/")
		if name != "" && name != "index.html" {
			if st, err := fs.Stat(dist, name); err == nil && !st.IsDir() {
				if strings.HasPrefix(name, "assets/") {
					// Vite puts a content hash in every asset name.
					h.Set("Cache-Control", "public, max-age=31536000, immutable")
				} else {
					h.Set("Cache-Control", "no-cache")
				}
				files.ServeHTTP(w, r)
				return
			}
		}
		h.Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(index))
	})
}
