package api

import (
	"bytes"
	"errors"
	"io/fs"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/tunnelsvc/tunnelsvc/daemon/bundle"
)

// Scripts are the machine scripts the daemon serves (embedded at build).
type Scripts struct {
	Bootstrap, Uninstall []byte
}

// Served binaries (spec §4.5): directory under --static-dir, and the names.
var staticBinaries = map[string]map[string]bool{
	"agents":    {"tunnel-agent-linux-amd64": true, "tunnel-agent-linux-arm64": true},
	"revtunnel": {"revtunnel-client-linux-amd64": true, "revtunnel-client-linux-arm64": true, "revtunnel-client-linux-arm": true},
}

// staticBootstrap: GET /static/bootstrap.sh with {base_url} substituted.
func (s *Server) staticBootstrap(w http.ResponseWriter, r *http.Request) error {
	if len(s.scripts.Bootstrap) == 0 {
		return Errorf(http.StatusNotFound, "bootstrap.sh is not built into this daemon")
	}
	// The script carries the base URL inside single quotes and a comment;
	// validate.BaseURL admits nothing the shell would interpret there.
	base, _, err := s.joinBase(r)
	if err != nil {
		return err
	}
	writeScript(w, bootstrapScript(s.scripts.Bootstrap, base))
	return nil
}

// bootstrapScript substitutes a base URL that passed validate.BaseURL.
func bootstrapScript(script []byte, base string) string {
	return strings.ReplaceAll(string(script), "{base_url}", base)
}

// staticUninstall: GET /static/tunnel-uninstall.sh.
func (s *Server) staticUninstall(w http.ResponseWriter, r *http.Request) error {
	if len(s.scripts.Uninstall) == 0 {
		return Errorf(http.StatusNotFound, "tunnel-uninstall.sh is not built into this daemon")
	}
	writeScript(w, string(s.scripts.Uninstall))
	return nil
}

func writeScript(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "text/x-shellscript; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Write([]byte(body))
}

// staticBinary: GET /static/{dir}/{file} for the machine binaries and their
// .sha256 files, from --static-dir.
func (s *Server) staticBinary(dir string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		file := mux.Vars(r)["file"]
		name := strings.TrimSuffix(file, ".sha256")
		if !staticBinaries[dir][name] {
			return Errorf(http.StatusNotFound, "no such file: /static/%s/%s", dir, file)
		}
		path := filepath.Join(s.cfg.StaticDir, dir, file)
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return Errorf(http.StatusNotFound, "%s is not built: run `make build` (it builds the machine binaries into bin/static) and serve with --static-dir pointing there, or install the tunnelsvc package; looked for %s", file, path)
		}
		if err != nil {
			return Internal("could not open "+file, err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil || st.IsDir() {
			return Internal("could not read "+file, err)
		}
		if strings.HasSuffix(file, ".sha256") {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		} else {
			w.Header().Set("Content-Type", "application/octet-stream")
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		http.ServeContent(w, r, file, st.ModTime(), f)
		return nil
	}
}

// peerIsLocal says whether the TCP peer itself (not X-Forwarded-For) is in
// --local-nets: only then are forwarding headers believed (the rule of
// auth.ClientAddr).
func (s *Server) peerIsLocal(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && s.cfg.IsLocal(ap.Addr())
}

// staticBundle: GET /static/bundles/{file}: the machine bundle of an
// architecture, its .sha256 (sha256sum's format), and VERSION, the bundle
// version bootstrap.sh records on the machine. Built from --static-dir on
// demand (see bundle.Build's cache).
func (s *Server) staticBundle(w http.ResponseWriter, r *http.Request) error {
	file := mux.Vars(r)["file"]
	if file == "VERSION" {
		v, err := bundle.Version(s.cfg.StaticDir)
		if err != nil {
			return bundleError(err)
		}
		writeText(w, v+"\n")
		return nil
	}
	name := strings.TrimSuffix(file, ".sha256")
	arch := ""
	for _, a := range bundle.Arches {
		if name == bundle.FileName(a) {
			arch = a
		}
	}
	if arch == "" {
		return Errorf(http.StatusNotFound, "no such file: /static/bundles/%s (bundles exist for linux-%s)", file, strings.Join(bundle.Arches, " and linux-"))
	}
	b, err := bundle.Build(s.cfg.StaticDir, arch)
	if err != nil {
		return bundleError(err)
	}
	if name != file {
		writeText(w, b.SHA256+"  "+name+"\n")
		return nil
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(w, r, file, time.Time{}, bytes.NewReader(b.Data))
	return nil
}

// bundleError: a missing input is the operator's to fix (404 with what to
// do), anything else is ours.
func bundleError(err error) error {
	var missing *bundle.MissingError
	if errors.As(err, &missing) {
		return &Error{Status: http.StatusNotFound, Msg: missing.Error(), Err: err}
	}
	return Internal("could not build the machine bundle", err)
}

// machineUnits are the files bootstrap.sh installs as they are in the
// bundle, so that a joined machine and an updated one run the same text.
var machineUnits = map[string]func() string{
	"revtunnel-client.service": bundle.ClientUnit,
	"tunnel-agent.service":     bundle.AgentUnit,
	"sudoers-tunnel-agent":     bundle.AgentSudoers,
}

// staticUnit: GET /static/units/{file}.
func (s *Server) staticUnit(w http.ResponseWriter, r *http.Request) error {
	file := mux.Vars(r)["file"]
	text, ok := machineUnits[file]
	if !ok {
		return Errorf(http.StatusNotFound, "no such file: /static/units/%s", file)
	}
	writeText(w, text())
	return nil
}

func writeText(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Write([]byte(body))
}
