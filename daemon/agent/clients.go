package agent

// Several edges (issue 28): a machine runs one tunnel client per edge of
// its cluster, so that it stays reachable through any edge. The first (the
// machine's home edge) is revtunnel-client.service with
// /etc/revtunnel/client.toml, as on a one-edge install; each other edge is
// revtunnel-client@<edge>.service with /etc/revtunnel/client-<edge>.toml.
// The daemon sends the whole set at once (PUT /clients); root's helper
// (`tunnel-agent apply-clients`) installs every config in it, starts the
// clients of new edges, and stops and removes those of edges that left.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/atomicfile"
	"github.com/tunnelsvc/tunnelsvc/daemon/bundle"
	"github.com/tunnelsvc/tunnelsvc/daemon/edgename"
)

// ClientSet is PUT /clients's body and apply-clients's stdin.
type ClientSet struct {
	// Generation is the set's config generation (each config's first
	// line names it too).
	Generation int64 `json:"generation"`
	// Primary is the home edge's config: revtunnel-client.service's.
	Primary string `json:"primary"`
	// Edges are the other edges' clients.
	Edges []EdgeClient `json:"edges"`
	// Reconnect names edges of Edges whose client restarts even when its
	// config is unchanged: the daemon saw it not connected to its edge,
	// which is up again, and frpc would wait out its backoff (up to
	// 20 s) before trying. Only agents listing ReconnectCapability take it.
	Reconnect []string `json:"reconnect,omitempty"`
}

// EdgeClient is the tunnel client of one edge besides the home edge.
type EdgeClient struct {
	Edge   string `json:"edge"`
	Config string `json:"config"`
}

// MaxEdges bounds the clients of a set besides the primary. The whole set,
// like every request to the agent, is at most MaxConfigBytes.
const MaxEdges = 16

// ClientsCapability is the capability GET /status lists when the agent
// takes a ClientSet.
const ClientsCapability = "edges"

// ReconnectCapability is listed when the agent takes ClientSet.Reconnect.
const ReconnectCapability = "reconnect"

// EdgeUnit is the unit of edge's tunnel client.
func EdgeUnit(edge string) string { return "revtunnel-client@" + edge + ".service" }

// EdgeConfigFile is the name of edge's client config, beside client.toml.
func EdgeConfigFile(edge string) string { return "client-" + edge + ".toml" }

// installedEdges names the edges whose client config is in dir.
func installedEdges(dir string) []string {
	paths, _ := filepath.Glob(filepath.Join(dir, "client-*.toml"))
	sort.Strings(paths)
	var out []string
	for _, p := range paths {
		edge := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "client-"), ".toml")
		if edgename.Check(edge) == nil {
			out = append(out, edge)
		}
	}
	return out
}

// ParseClientSet reads and checks a set: a primary config, at most
// MaxEdges edges with valid, distinct names and a config each. A refusal
// wraps ErrRefused.
func ParseClientSet(body []byte) (ClientSet, error) {
	var set ClientSet
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&set); err != nil {
		return set, refused("the client set is not JSON of the expected shape (%v)", err)
	}
	if strings.TrimSpace(set.Primary) == "" {
		return set, refused("the client set has no primary config")
	}
	if len(set.Edges) > MaxEdges {
		return set, refused("the client set names %d edges; at most %d", len(set.Edges), MaxEdges)
	}
	seen := map[string]bool{}
	for _, e := range set.Edges {
		if err := edgename.Check(e.Edge); err != nil {
			return set, refused("%v", err)
		}
		if seen[e.Edge] {
			return set, refused("the client set names edge %q twice", e.Edge)
		}
		seen[e.Edge] = true
		if strings.TrimSpace(e.Config) == "" {
			return set, refused("edge %q has an empty config", e.Edge)
		}
		if len(e.Config) > MaxConfigBytes {
			return set, refused("edge %q's config is larger than %d bytes", e.Edge, MaxConfigBytes)
		}
	}
	if len(set.Primary) > MaxConfigBytes {
		return set, refused("the primary config is larger than %d bytes", MaxConfigBytes)
	}
	for _, e := range set.Reconnect {
		if !seen[e] {
			return set, refused("the client set asks to reconnect edge %q, which it does not name", e)
		}
	}
	return set, nil
}

// ClientSetter is what a System does when it can run several clients; the
// agent lists ClientsCapability only when its System is one.
type ClientSetter interface {
	ApplyClients(ctx context.Context, set []byte) error
}

func (s *Server) putClients(ctx context.Context, w http.ResponseWriter, body []byte) {
	cs, ok := s.Sys.(ClientSetter)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "this agent runs one tunnel client only"})
		return
	}
	set, err := ParseClientSet(body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error() + "; the installed clients are kept"})
		return
	}
	if err := cs.ApplyClients(ctx, body); err != nil {
		if errors.Is(err, ErrRefused) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		s.fail(w, "apply the client set", err)
		return
	}
	if gen, ok := Generation([]byte(set.Primary)); ok {
		s.applied.Store(gen)
	}
	edges := make([]string, len(set.Edges))
	for i, e := range set.Edges {
		edges[i] = e.Edge
	}
	msg := fmt.Sprintf("config generation %d installed: %s and %d other edge client(s)", set.Generation, s.Unit, len(edges))
	if len(edges) > 0 {
		msg += " (" + strings.Join(edges, ", ") + ")"
	}
	writeJSON(w, http.StatusOK, ConfigAnswer{Generation: set.Generation, Message: msg})
}

// ClientsApplier installs a ClientSet as root: the primary config as
// Applier does, each edge's config likewise beside it (a new file takes
// client.toml's owner and mode), its unit enabled and started (restarted
// when the config names another server, else reloaded), and the clients
// of edges no longer in the set stopped, disabled and removed.
type ClientsApplier struct {
	FRPC string
	// Dir holds client.toml and the edges' configs (/etc/revtunnel).
	Dir string
	// Systemctl runs systemctl (default: the real one).
	Systemctl func(ctx context.Context, args ...string) (string, error)
	// Reload reloads a running client from its config (default: frpc
	// reload -c path).
	Reload func(ctx context.Context, path string) (string, error)
	// UnitDir is where the edges' unit template goes (default
	// /etc/systemd/system).
	UnitDir string
}

// installTemplate writes revtunnel-client@.service (bundle.EdgeClientUnit)
// when it is missing or differs, and has systemd read it.
func (a ClientsApplier) installTemplate(ctx context.Context) error {
	dir := a.UnitDir
	if dir == "" {
		dir = "/etc/systemd/system"
	}
	path := filepath.Join(dir, "revtunnel-client@.service")
	want := []byte(bundle.EdgeClientUnit())
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, want) {
		return nil
	}
	if err := atomicfile.Write(path, want, 0o644); err != nil {
		return err
	}
	if out, err := a.systemctl(ctx, "daemon-reload"); err != nil {
		return &ToolError{Op: "systemctl daemon-reload", Output: out, Err: err}
	}
	return nil
}

func (a ClientsApplier) systemctl(ctx context.Context, args ...string) (string, error) {
	if a.Systemctl != nil {
		return a.Systemctl(ctx, args...)
	}
	return run(ctx, nil, "systemctl", args...)
}

func (a ClientsApplier) reload(ctx context.Context, path string) (string, error) {
	if a.Reload != nil {
		return a.Reload(ctx, path)
	}
	return run(ctx, nil, a.FRPC, "reload", "-c", path)
}

// Apply installs set. It goes on past a failing edge, so that one bad
// edge does not keep the others from their clients, and returns every
// failure in words.
func (a ClientsApplier) Apply(ctx context.Context, set ClientSet) error {
	primary := filepath.Join(a.Dir, "client.toml")
	var pReload func(ctx context.Context) (string, error)
	if a.Reload != nil {
		pReload = func(ctx context.Context) (string, error) { return a.Reload(ctx, primary) }
	}
	if err := (Applier{FRPC: a.FRPC, Path: primary, Reload: pReload}).Apply(ctx, []byte(set.Primary)); err != nil {
		return fmt.Errorf("the home edge's client (revtunnel-client.service): %w", err)
	}
	var errs []error
	if len(set.Edges) > 0 {
		if err := a.installTemplate(ctx); err != nil {
			return fmt.Errorf("the edges' unit (revtunnel-client@.service): %w", err)
		}
	}
	keep := map[string]bool{}
	reconnect := map[string]bool{}
	for _, e := range set.Reconnect {
		reconnect[e] = true
	}
	for _, e := range set.Edges {
		keep[e.Edge] = true
		if err := a.applyEdge(ctx, e, primary, reconnect[e.Edge]); err != nil {
			errs = append(errs, fmt.Errorf("edge %s's client (%s): %w", e.Edge, EdgeUnit(e.Edge), err))
		}
	}
	for _, edge := range installedEdges(a.Dir) {
		if keep[edge] {
			continue
		}
		if out, err := a.systemctl(ctx, "disable", "--now", EdgeUnit(edge)); err != nil {
			errs = append(errs, &ToolError{Op: "systemctl disable --now " + EdgeUnit(edge), Output: out, Err: err})
			continue
		}
		if err := os.Remove(filepath.Join(a.Dir, EdgeConfigFile(edge))); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// applyEdge installs one edge's client; reconnect restarts it even when
// its config is the one installed.
func (a ClientsApplier) applyEdge(ctx context.Context, e EdgeClient, primary string, reconnect bool) error {
	path := filepath.Join(a.Dir, EdgeConfigFile(e.Edge))
	unit := EdgeUnit(e.Edge)
	old, oldErr := os.ReadFile(path)
	restart := reconnect || oldErr != nil || serverOf(old) != serverOf([]byte(e.Config))
	ap := Applier{FRPC: a.FRPC, Path: path, Like: primary, Reload: func(ctx context.Context) (string, error) {
		if out, err := a.systemctl(ctx, "enable", unit); err != nil {
			return out, err
		}
		if !restart {
			if _, err := a.systemctl(ctx, "is-active", "--quiet", unit); err == nil {
				out, err := a.reload(ctx, path)
				if err == nil || !stillStarting(out, err) {
					return out, err
				}
				// Active but not yet listening: a client the last set
				// restarted a moment ago. Its reload would be refused and
				// the previous file put back, which it would then start
				// with; a restart reads the file just written.
			}
		}
		return a.systemctl(ctx, "restart", unit)
	}}
	return ap.Apply(ctx, []byte(e.Config))
}

// stillStarting reports whether a reload failed because the client's
// admin API is not listening: frpc is started but not yet serving it.
func stillStarting(out string, err error) bool {
	return strings.Contains(out, "connection refused") || strings.Contains(err.Error(), "connection refused")
}

// serverOf is what a running frpc cannot take by a reload: the server's
// address, port and transport and the CA it pins (frpc reload applies
// proxies only).
func serverOf(config []byte) string {
	var keep []string
	for _, line := range strings.Split(string(config), "\n") {
		t := strings.TrimSpace(line)
		for _, k := range []string{"serverAddr", "serverPort", "transport.protocol", "protocol", "transport.tls.trustedCaFile", "transport.tls.serverName", "trustedCaFile", "serverName"} {
			if strings.HasPrefix(t, k+" ") || strings.HasPrefix(t, k+"=") {
				keep = append(keep, t)
			}
		}
	}
	return strings.Join(keep, "\n")
}

// ApplyClients runs root's helper with the set on stdin.
func (c Commands) ApplyClients(ctx context.Context, set []byte) error {
	return c.apply(ctx, "apply-clients", set)
}
