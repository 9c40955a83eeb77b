package api_test

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel"
)

type edgeWithParts struct {
	Name  string      `json:"name"`
	Parts []edgeParts `json:"parts"`
}

type edgeParts struct {
	Part         string  `json:"part"`
	Label        string  `json:"label"`
	InUse        bool    `json:"in_use"`
	Drifted      bool    `json:"drifted"`
	Generation   int64   `json:"generation"`
	PendingSince *string `json:"pending_since"`
	Error        string  `json:"error"`
}

// TestEdgesShowTheirHost: the daemon built as Serve builds it keeps its
// host's parts as desired and records them. The tunnel server refusing its
// config shows on the Edges page, in the tool's words, since when; the
// previous config stays; once the tool takes it, the part is retried by
// itself (no notice, no operator) and shows as desired, one generation on.
func TestEdgesShowTheirHost(t *testing.T) {
	bin := t.TempDir()
	frps := filepath.Join(bin, "frps")
	refuse := "#!/bin/sh\necho 'toml: line 7: unknown field \"bogus\"' >&2\nexit 1\n"
	if err := os.WriteFile(frps, []byte(refuse), 0o755); err != nil {
		t.Fatal(err)
	}
	d := newWiredDaemonWith(t, func(c *config.Config) { c.BinDir, c.EdgeName = bin, "edge-a" }, app.Deps{Units: &testutil.MemoryUnits{}})
	d.call("POST", "/api/auth/setup", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	part := func(name string) (edgeParts, error) {
		var es []edgeWithParts
		d.call("GET", "/api/edges", "", http.StatusOK, &es)
		if len(es) != 1 {
			return edgeParts{}, fmt.Errorf("edges %+v", es)
		}
		for _, p := range es[0].Parts {
			if p.Part == name {
				return p, nil
			}
		}
		return edgeParts{}, fmt.Errorf("no part %s in %+v", name, es[0].Parts)
	}
	var pending edgeParts
	testutil.Eventually(t, 10*time.Second, "the tunnel server's config pending", func() (err error) {
		if pending, err = part("frps"); err == nil && (!pending.Drifted || pending.PendingSince == nil) {
			err = fmt.Errorf("frps: %+v", pending)
		}
		return err
	})
	if !strings.Contains(pending.Error, `frps verify: toml: line 7: unknown field "bogus"`) {
		t.Fatalf("pending without the tool's words: %+v", pending)
	}
	if _, err := os.Stat(d.a.Config.SystemPath(revtunnel.ServerConfigPath)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused config was written: %v", err)
	}
	// The tool now takes it: retried with backoff, nothing else done.
	if err := os.WriteFile(frps, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	took := testutil.Eventually(t, 20*time.Second, "the tunnel server's config applied", func() error {
		p, err := part("frps")
		if err == nil && (p.Drifted || p.Error != "" || p.Generation != 1) {
			err = fmt.Errorf("frps: %+v", p)
		}
		return err
	})
	t.Logf("applied %s after the tool took it", took.Round(time.Millisecond))
	if _, err := os.Stat(d.a.Config.SystemPath(revtunnel.ServerConfigPath)); err != nil {
		t.Fatal(err)
	}
}

// TestAProbeDoesNotStartAnother: a change wakes the loops that follow it
// (the gate, this edge's host, the prober), and a probe's result is a
// change the dashboards hear of, as "probes", not "tunnels": were it
// "tunnels", every probe would wake the prober again, without end (and
// each edge would wake the other's). After an HTTP tunnel is made, the
// probes settle within a few rounds.
func TestAProbeDoesNotStartAnother(t *testing.T) {
	d := newWiredDaemon(t)
	d.call("POST", "/api/local/skip", `{"domain":"example.test"}`, http.StatusOK, nil)
	id, _ := d.join("nas")
	_, events, cancel := d.a.Hub.Subscribe()
	defer cancel()
	d.call("POST", "/api/tunnels", fmt.Sprintf(`{"machine_id":%d,"name":"wiki","kind":"http","local_port":8080,"subdomain":"wiki"}`, id), http.StatusCreated, nil)
	probes, tunnels := 0, 0
	window := time.After(3 * time.Second)
	for done := false; !done; {
		select {
		case m, ok := <-events:
			if !ok {
				t.Fatalf("the event stream was cut off after %d probes: its reader was too slow for them", probes)
			}
			switch m.Event {
			case "probes":
				probes++
			case "tunnels":
				tunnels++
			}
		case <-window:
			done = true
		}
	}
	if probes == 0 || probes > 5 {
		t.Fatalf("%d probe results in 3 s after one change (%d tunnel events): want a few", probes, tunnels)
	}
	t.Logf("%d probe results and %d tunnel events in 3 s after the change", probes, tunnels)
}
