package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/site"
)

// The package's local socket (tunnelsvc-local.socket), and where a daemon
// that is not socket-activated puts its own (api.sock in its data dir).
const (
	packageSocket  = "/run/tunnelsvc/api.sock"
	defaultDataDir = "/var/lib/tunnelsvc"
)

// apiClient calls the API with an API token (TUNNELSVC_URL and
// TUNNELSVC_TOKEN), or as root through the daemon's local socket.
type apiClient struct {
	base  string
	token string
	http  *http.Client
	// where says how it reaches the API, for errors.
	where string
}

// newAPIClient picks the API: TUNNELSVC_URL with TUNNELSVC_TOKEN, else the
// socket given, else the local socket that exists.
func newAPIClient(socket string) (*apiClient, error) {
	if u := strings.TrimRight(os.Getenv("TUNNELSVC_URL"), "/"); u != "" {
		tok := os.Getenv("TUNNELSVC_TOKEN")
		if tok == "" {
			return nil, errors.New("TUNNELSVC_URL is set and TUNNELSVC_TOKEN is not: create an API token (Settings → API tokens) and set it")
		}
		return &apiClient{base: u, token: tok, http: &http.Client{Timeout: 2 * time.Minute}, where: u}, nil
	}
	if socket == "" {
		socket = localSocket()
	}
	if _, err := os.Stat(socket); err != nil {
		return nil, fmt.Errorf("no local API socket at %s (%v): run this as root on the edge, or set TUNNELSVC_URL and TUNNELSVC_TOKEN", socket, errors.Unwrap(err))
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}
	return &apiClient{base: "http://local", http: &http.Client{Transport: tr, Timeout: 2 * time.Minute}, where: socket}, nil
}

// localSocket is the socket of this edge's daemon: $TUNNELSVC_LOCAL_SOCKET,
// the package's, or the one in the data dir.
func localSocket() string {
	if s := os.Getenv("TUNNELSVC_LOCAL_SOCKET"); s != "" {
		return s
	}
	if _, err := os.Stat(packageSocket); err == nil {
		return packageSocket
	}
	dir := os.Getenv("TUNNELSVC_DATA_DIR")
	if dir == "" {
		dir = defaultDataDir
	}
	return filepath.Join(dir, "api.sock")
}

// call sends body (nil: none) to path and decodes the answer's data into
// out; an error answer is returned in the API's words.
func (c *apiClient) call(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("could not reach the API at %s: %w", c.where, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
	}
	var env struct {
		Data  json.RawMessage `json:"data"`
		Error string          `json:"error"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("the API at %s answered %d, not JSON: %.200s", c.where, resp.StatusCode, raw)
	}
	if resp.StatusCode >= 300 {
		if env.Error == "" {
			env.Error = http.StatusText(resp.StatusCode)
		}
		return fmt.Errorf("%s (%d)", env.Error, resp.StatusCode)
	}
	return json.Unmarshal(env.Data, out)
}

// exportCmd: tunnelsvc export, the cluster as a file on stdout.
func exportCmd(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	socket := fs.String("socket", "", "the daemon's local API socket (default: "+packageSocket+", else api.sock in $TUNNELSVC_DATA_DIR)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := newAPIClient(*socket)
	if err != nil {
		return err
	}
	var got struct {
		YAML string `json:"yaml"`
	}
	if err := c.call("GET", "/api/export", nil, &got); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	_, err = io.WriteString(out, got.YAML)
	return err
}

// applyCmd: tunnelsvc apply -f FILE [--dry-run] [--prune].
func applyCmd(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("apply", flag.ContinueOnError)
	file := fs.String("f", "", "the site file (- for stdin)")
	dry := fs.Bool("dry-run", false, "show the changes and make none")
	prune := fs.Bool("prune", false, "also remove the tunnels the file does not name")
	socket := fs.String("socket", "", "the daemon's local API socket (default: "+packageSocket+", else api.sock in $TUNNELSVC_DATA_DIR)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *file == "" {
		return errors.New("apply: -f FILE is required (- for stdin)")
	}
	text, err := readSiteFile(*file)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	c, err := newAPIClient(*socket)
	if err != nil {
		return err
	}
	var res struct {
		Changes []struct {
			Text string `json:"text"`
		} `json:"changes"`
		Summary string `json:"summary"`
	}
	body := map[string]any{"spec": string(text), "dry_run": *dry, "prune": *prune}
	if err := c.call("POST", "/api/apply", body, &res); err != nil {
		return fmt.Errorf("apply: %s: %w", *file, err)
	}
	for _, ch := range res.Changes {
		fmt.Fprintln(out, ch.Text)
	}
	fmt.Fprintln(out, res.Summary)
	return nil
}

// readSiteFile reads the file, or stdin for "-", up to site.MaxBytes.
func readSiteFile(name string) ([]byte, error) {
	var r io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, site.MaxBytes+1))
	if err == nil && len(b) > site.MaxBytes {
		err = fmt.Errorf("%s is larger than %d bytes", name, site.MaxBytes)
	}
	return b, err
}
