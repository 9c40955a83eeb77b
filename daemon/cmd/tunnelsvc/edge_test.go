package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/api"
	"github.com/tunnelsvc/tunnelsvc/daemon/app"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/internal/testutil"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// edgeDaemon is one edge's daemon, in this process, its API served over
// HTTPS on loopback.
type edgeDaemon struct {
	t      *testing.T
	a      *app.App
	srv    *httptest.Server
	cookie string
}

// startEdge builds a daemon as Serve does from cfg, with its loops, and
// serves it over TLS.
func startEdge(t *testing.T, cfg config.Config) *edgeDaemon {
	t.Helper()
	d := &edgeDaemon{t: t}
	var h http.Handler = http.NotFoundHandler()
	d.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	d.srv.StartTLS()
	if cfg.BaseURL == "" {
		cfg.BaseURL = d.srv.URL
	}
	lo := testutil.TunnelPorts(t)
	cfg.TunnelPortLo, cfg.TunnelPortHi = lo, lo+199
	a, err := app.New(context.Background(), &cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), app.Deps{Units: units.Unavailable{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.Loops.Start(ctx)
	h = api.ForDaemon(a)
	d.a = a
	t.Cleanup(func() { d.srv.Close(); cancel(); a.Close() })
	return d
}

func (d *edgeDaemon) call(method, path, body string, want int, out any) string {
	d.t.Helper()
	req, _ := http.NewRequest(method, d.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if d.cookie != "" {
		req.Header.Set("Cookie", d.cookie)
	}
	res, err := d.srv.Client().Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		d.t.Fatalf("%s %s: %d %s, want %d", method, path, res.StatusCode, raw, want)
	}
	for _, c := range res.Cookies() {
		if c.Name == "tunnel_session" {
			d.cookie = c.Name + "=" + c.Value
		}
	}
	if out != nil {
		var env struct{ Data json.RawMessage }
		if err := json.Unmarshal(raw, &env); err != nil || json.Unmarshal(env.Data, out) != nil {
			d.t.Fatalf("%s %s: cannot decode %s", method, path, raw)
		}
	}
	return string(raw)
}

type edgeRow struct {
	ID      int64  `json:"id"`
	Name    string `json:"name"`
	Address string `json:"address"`
	Status  string `json:"status"`
	This    bool   `json:"this"`
}

// A second VPS joins with the command the dashboard gives: it gets the
// database URL and the sealing key over HTTPS, written 0600, and its
// daemon serves the same cluster (a session made on the first is good on
// it, the sealed tunnel CA opens). The join runs twice safely; a used
// token is refused to another edge; the first edge retires the second.
func TestEdgeJoin(t *testing.T) {
	url := testutil.PostgresURL(t)
	cfgA := config.Default()
	cfgA.DataDir, cfgA.SystemRoot, cfgA.Database, cfgA.EdgeName = t.TempDir(), t.TempDir(), url, "edge-a"
	a := startEdge(t, cfgA)
	a.call("POST", "/api/auth/setup", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)

	var tok struct {
		Token, Command string
	}
	a.call("POST", "/api/edges/tokens", "", http.StatusOK, &tok)
	if want := "tunnelsvc edge join " + a.srv.URL + " " + tok.Token; tok.Command != want {
		t.Fatalf("command %q, want %q", tok.Command, want)
	}
	// The VPS trusts the first edge's certificate through --ca-file.
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	root, dataB := t.TempDir(), t.TempDir()
	starts := 0
	join := func(args ...string) (string, error) {
		var out bytes.Buffer
		j := edgeJoin{out: &out, root: root, start: func(context.Context) error { starts++; return nil }}
		err := j.run(context.Background(), append([]string{"--ca-file", caFile, "--data-dir", dataB}, args...))
		return out.String(), err
	}
	if _, err := join("http://"+strings.TrimPrefix(a.srv.URL, "https://"), tok.Token, "--name", "edge-b"); err == nil || !strings.Contains(err.Error(), "only over HTTPS") {
		t.Fatalf("http:// accepted: %v", err)
	}
	out, err := join(a.srv.URL, tok.Token, "--name", "edge-b")
	if err != nil {
		t.Fatalf("join: %v\n%s", err, out)
	}
	t.Logf("edge join said:\n%s", out)
	for _, want := range []string{`accepted this VPS as edge "edge-b"`, "sealing key", "written", "TUNNELSVC_EDGE_NAME=edge-b", `serves the cluster as edge "edge-b" (with edge-a)`} {
		if !strings.Contains(out, want) {
			t.Fatalf("join output lacks %q:\n%s", want, out)
		}
	}
	keyA, _ := os.ReadFile(filepath.Join(cfgA.DataDir, "secret.key"))
	for path, want := range map[string]string{
		filepath.Join(dataB, "secret.key"):                 string(keyA),
		filepath.Join(root, "etc/tunnelsvc/database-url"):  url + "\n",
		filepath.Join(root, "etc/tunnelsvc/tunnelsvc.env"): "TUNNELSVC_EDGE_NAME=edge-b\n",
	} {
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Fatalf("%s: %q, %v", path, got, err)
		}
		if fi, _ := os.Stat(path); strings.HasSuffix(path, "tunnelsvc.env") == false && fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s is %v, want 0600", path, fi.Mode().Perm())
		}
	}
	// Run twice: nothing changes, nothing is lost.
	out, err = join(a.srv.URL, tok.Token, "--name", "edge-b")
	if err != nil || !strings.Contains(out, "already in place") || !strings.Contains(out, "already edge-b") || starts != 2 {
		t.Fatalf("second join: %v, %d starts\n%s", err, starts, out)
	}
	// The token is edge-b's now.
	if _, err := join(a.srv.URL, tok.Token, "--name", "edge-c"); err == nil || !strings.Contains(err.Error(), "invalid or expired token") {
		t.Fatalf("a used token for another edge: %v", err)
	}

	// Edge B's daemon, from what join wrote.
	cfgB := config.Default()
	cfgB.DataDir, cfgB.SystemRoot, cfgB.EdgeName = dataB, t.TempDir(), "edge-b"
	dbURL, _ := os.ReadFile(filepath.Join(root, "etc/tunnelsvc/database-url"))
	cfgB.Database = strings.TrimSpace(string(dbURL))
	b := startEdge(t, cfgB)
	a.call("POST", "/api/auth/login", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	b.cookie = a.cookie
	var edges []edgeRow
	testutil.Eventually(t, 5*time.Second, "both edges up, seen from B", func() error {
		b.call("GET", "/api/edges", "", http.StatusOK, &edges)
		if len(edges) != 2 || edges[0].Name != "edge-a" || edges[1].Name != "edge-b" || edges[0].Status != "up" || edges[1].Status != "up" || !edges[1].This {
			return fmt.Errorf("%+v", edges)
		}
		return nil
	})
	// B opens what A sealed: the tunnel CA both edges' frps certificates
	// come from.
	if _, err := b.a.Machines.CA.Load(context.Background()); err != nil {
		t.Fatalf("edge B cannot open the tunnel CA: %v", err)
	}

	// A cannot retire itself; it retires B, which is forgotten (no machine
	// is connected through it) at A's next heartbeat.
	a.call("DELETE", fmt.Sprintf("/api/edges/%d", edges[0].ID), "", http.StatusConflict, nil)
	a.call("DELETE", fmt.Sprintf("/api/edges/%d", edges[1].ID), "", http.StatusAccepted, nil)
	testutil.Eventually(t, app.EdgeBeat+5*time.Second, "edge B forgotten", func() error {
		a.call("GET", "/api/edges", "", http.StatusOK, &edges)
		if len(edges) != 1 || edges[0].Name != "edge-a" {
			return fmt.Errorf("%+v", edges)
		}
		return nil
	})
	var audit struct {
		Entries []struct{ Kind, Detail string } `json:"entries"`
	}
	raw := a.call("GET", "/api/security/logs?category=settings&limit=50", "", http.StatusOK, nil)
	_ = json.Unmarshal([]byte(raw), &struct{ Data any }{&audit})
	for _, kind := range []string{"EDGE_TOKEN_CREATED", "EDGE_JOINED", "EDGE_JOIN_REFUSED", "EDGE_RETIRING"} {
		if !strings.Contains(raw, kind) {
			t.Fatalf("audit log lacks %s: %s", kind, raw)
		}
	}
}

// On SQLite nothing else can share the state: no token is issued.
func TestEdgeTokenNeedsPostgreSQL(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir, cfg.SystemRoot = t.TempDir(), t.TempDir()
	d := startEdge(t, cfg)
	d.call("POST", "/api/auth/setup", `{"password":"correct horse battery staple"}`, http.StatusOK, nil)
	body := d.call("POST", "/api/edges/tokens", "", http.StatusConflict, nil)
	if !strings.Contains(body, "move it to PostgreSQL first") {
		t.Fatalf("refusal: %s", body)
	}
	var edges []edgeRow
	d.call("GET", "/api/edges", "", http.StatusOK, &edges)
	if len(edges) != 1 || !edges[0].This || edges[0].Status != "up" {
		t.Fatalf("a box is its one edge: %+v", edges)
	}
}

// A daemon that does not start: the join's error gives systemctl's words
// and then the daemon's own, from its journal since the restart.
func TestStartUnitsSaysWhyTheDaemonStopped(t *testing.T) {
	var ran []string
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		ran = append(ran, name+" "+strings.Join(args, " "))
		switch {
		case name == "systemctl" && args[0] == "restart":
			return []byte("Job for tunnelsvc.service failed because the control process exited with error code.\n"), errors.New("exit status 1")
		case name == "journalctl":
			return []byte("tunnelsvc: open database postgres://postgres:***@db:5432/tunnelsvc: connect: network is unreachable\n"), nil
		}
		return nil, nil
	}
	err := startUnitsWith(context.Background(), run)
	if err == nil {
		t.Fatal("no error for a daemon that did not start")
	}
	for _, want := range []string{"systemctl restart tunnelsvc.service: exit status 1: Job for tunnelsvc.service failed",
		"tunnelsvc.service said:\ntunnelsvc: open database postgres://postgres:***@db:5432/tunnelsvc: connect: network is unreachable"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q lacks %q", err, want)
		}
	}
	if len(ran) != 2 || !strings.HasPrefix(ran[1], "journalctl --no-pager -q -o cat -n 10 --since @") || !strings.HasSuffix(ran[1], " _SYSTEMD_UNIT=tunnelsvc.service") {
		t.Fatalf("commands: %q", ran)
	}

	// Started: both commands, nothing else.
	ran = nil
	ok := func(_ context.Context, name string, args ...string) ([]byte, error) {
		ran = append(ran, name+" "+strings.Join(args, " "))
		return nil, nil
	}
	if err := startUnitsWith(context.Background(), ok); err != nil || len(ran) != 2 || ran[1] != startLine {
		t.Fatalf("a start that works: %v, commands %q", err, ran)
	}
}
