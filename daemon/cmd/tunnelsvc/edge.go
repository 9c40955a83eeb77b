package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/atomicfile"
	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/edges"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
)

// envFile is the package's environment file for tunnelsvc.service.
const envFile = "/etc/tunnelsvc/tunnelsvc.env"

// edgeJoin is `tunnelsvc edge join`; where it writes and how it starts
// the units are fields, so that the tests run it in a directory.
type edgeJoin struct {
	out io.Writer
	// root prefixes /etc/tunnelsvc (the system root, "/" on a VPS).
	root string
	// start starts the daemon's units with the new settings.
	start func(ctx context.Context) error
}

func edgeCmd(args []string, out io.Writer) error {
	if len(args) == 0 || args[0] != "join" {
		return errors.New("usage: tunnelsvc edge join [--name NAME] [--ca-file FILE] https://<an edge of the cluster> <token>")
	}
	j := edgeJoin{out: out, root: "/", start: startUnits}
	return j.run(context.Background(), args[1:])
}

func (j edgeJoin) run(ctx context.Context, args []string) error {
	flags := flag.NewFlagSet("edge join", flag.ContinueOnError)
	flags.SetOutput(j.out)
	name := flags.String("name", "", "this VPS's name among the edges (default: $TUNNELSVC_EDGE_NAME, else the host name)")
	caFile := flags.String("ca-file", "", "PEM file of the CA that signed the other edge's HTTPS certificate, when it is not one the system trusts")
	dataDir := flags.String("data-dir", envOr("TUNNELSVC_DATA_DIR", config.Default().DataDir), "the data directory, where the sealing key goes [$TUNNELSVC_DATA_DIR]")
	noStart := flags.Bool("no-start", false, "write the settings but do not start tunnelsvc")
	if err := flags.Parse(reorder(args)); err != nil {
		return err
	}
	if flags.NArg() != 2 {
		return errors.New("edge join: give the address of an edge of the cluster and the token: tunnelsvc edge join https://router.example.com edge_…")
	}
	base, token := strings.TrimRight(flags.Arg(0), "/"), strings.TrimSpace(flags.Arg(1))
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("edge join: %q: the other edge hands over the database's address and the sealing key, so it is asked only over HTTPS: give https://<its dashboard>", base)
	}
	if *name == "" {
		*name = envOr("TUNNELSVC_EDGE_NAME", config.DefaultEdgeName())
	}
	if err := config.CheckEdgeName(*name); err != nil {
		return fmt.Errorf("edge join: --name: %v", err)
	}
	client, err := httpsClient(*caFile)
	if err != nil {
		return err
	}
	g, err := fetchGrant(ctx, client, base, token, *name)
	if err != nil {
		return err
	}
	key, err := base64.StdEncoding.DecodeString(g.SealingKey)
	if err != nil || len(key) != 32 {
		return fmt.Errorf("edge join: %s answered a sealing key that is not 32 bytes of base64", base)
	}
	fmt.Fprintf(j.out, "%s accepted this VPS as edge %q\n", base, g.Name)

	keyPath := filepath.Join(*dataDir, seal.KeyFile)
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return err
	}
	msg, err := replaceSecret(keyPath, key)
	if err != nil {
		return fmt.Errorf("edge join: writing the sealing key: %w", err)
	}
	fmt.Fprintf(j.out, "sealing key %s: %s\n", keyPath, msg)

	credPath := filepath.Join(j.root, config.DatabaseCredentialFile)
	if err := os.MkdirAll(filepath.Dir(credPath), 0o755); err != nil {
		return err
	}
	msg, err = replaceSecret(credPath, []byte(g.DatabaseURL+"\n"))
	if err != nil {
		return fmt.Errorf("edge join: writing the database URL: %w", err)
	}
	fmt.Fprintf(j.out, "database URL %s: %s\n", credPath, msg)

	envPath := filepath.Join(j.root, envFile)
	changed, err := setEnv(envPath, "TUNNELSVC_EDGE_NAME", g.Name)
	if err != nil {
		return fmt.Errorf("edge join: %s: %w", envPath, err)
	}
	if changed {
		fmt.Fprintf(j.out, "edge name in %s: TUNNELSVC_EDGE_NAME=%s\n", envPath, g.Name)
	} else {
		fmt.Fprintf(j.out, "edge name in %s: already %s\n", envPath, g.Name)
	}
	if *noStart {
		fmt.Fprintf(j.out, "not started (--no-start); start it with: systemctl restart tunnelsvc.service; %s\n", startLine)
		return nil
	}
	if err := j.start(ctx); err != nil {
		return fmt.Errorf("edge join: the settings are written, but starting tunnelsvc failed: %w", err)
	}
	others := "no other edge yet"
	if len(g.Edges) > 0 {
		others = "with " + strings.Join(g.Edges, ", ")
	}
	fmt.Fprintf(j.out, "tunnelsvc started: this VPS serves the cluster as edge %q (%s)\n", g.Name, others)
	return nil
}

// reorder puts flags before the two arguments, so that both
// `edge join URL TOKEN --name x` and `edge join --name x URL TOKEN` work.
func reorder(args []string) []string {
	var flags, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			flags = append(flags, a)
			if !strings.Contains(a, "=") && a != "--no-start" && a != "-no-start" && i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		rest = append(rest, a)
	}
	return append(flags, rest...)
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func httpsClient(caFile string) (*http.Client, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("edge join: --ca-file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("edge join: --ca-file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, Proxy: http.ProxyFromEnvironment}}, nil
}

// fetchGrant asks the other edge for what this one needs, and says in
// words why it did not get it.
func fetchGrant(ctx context.Context, client *http.Client, base, token, name string) (edges.Grant, error) {
	var g edges.Grant
	body, _ := json.Marshal(map[string]string{"token": token, "name": name})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/edges/join", bytes.NewReader(body))
	if err != nil {
		return g, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return g, fmt.Errorf("edge join: could not reach %s: %w", base, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	var env struct {
		Data  edges.Grant `json:"data"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return g, fmt.Errorf("edge join: %s answered %s, not tunnelsvc's API: %.200s", base, res.Status, raw)
	}
	if res.StatusCode != http.StatusOK {
		msg := res.Status
		if env.Error != nil {
			msg = env.Error.Message
		}
		return g, fmt.Errorf("edge join: %s refused: %s", base, msg)
	}
	if env.Data.DatabaseURL == "" {
		return g, fmt.Errorf("edge join: %s answered no database URL", base)
	}
	return env.Data, nil
}

// replaceSecret writes data to path, 0600, and says what it did. A file
// that holds something else is kept beside it, never lost.
func replaceSecret(path string, data []byte) (string, error) {
	old, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Equal(old, data):
		return "already in place", os.Chmod(path, 0o600)
	case err == nil:
		keep := fmt.Sprintf("%s.before-join-%d", path, time.Now().Unix())
		if err := os.Rename(path, keep); err != nil {
			return "", err
		}
		if err := atomicfile.Write(path, data, 0o600); err != nil {
			return "", err
		}
		return "written; the one it replaces is kept as " + keep, nil
	case errors.Is(err, os.ErrNotExist):
		return "written", atomicfile.Write(path, data, 0o600)
	default:
		return "", err
	}
}

// setEnv sets NAME=value in an environment file, keeping every other
// line, and reports whether the file changed.
func setEnv(path, name, value string) (bool, error) {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	var out bytes.Buffer
	found := false
	sc := bufio.NewScanner(bytes.NewReader(old))
	for sc.Scan() {
		line := sc.Text()
		if k, _, ok := strings.Cut(strings.TrimSpace(line), "="); ok && k == name {
			if !found {
				fmt.Fprintf(&out, "%s=%s\n", name, value)
			}
			found = true
			continue
		}
		out.WriteString(line + "\n")
	}
	if !found {
		fmt.Fprintf(&out, "%s=%s\n", name, value)
	}
	if bytes.Equal(out.Bytes(), old) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	return true, atomicfile.Write(path, out.Bytes(), 0o644)
}

// startUnits (re)starts the daemon with its new settings and makes sure
// its sockets are listening, as the package enables them.
func startUnits(ctx context.Context) error { return startUnitsWith(ctx, runCommand) }

// runCommand runs a program and gives its combined output.
func runCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// daemonSaid is what the daemon's own processes logged since the given
// time (not systemd's lines about the unit), its last ten lines. The
// journal may take a moment to have them, so it is asked twice.
func daemonSaid(ctx context.Context, run func(ctx context.Context, name string, args ...string) ([]byte, error), since string) string {
	for try := 0; try < 2; try++ {
		if try > 0 {
			time.Sleep(300 * time.Millisecond)
		}
		log, err := run(ctx, "journalctl", "--no-pager", "-q", "-o", "cat", "-n", "10", "--since", since, "_SYSTEMD_UNIT=tunnelsvc.service")
		if err == nil && len(bytes.TrimSpace(log)) > 0 {
			return strings.TrimSpace(string(log))
		}
	}
	return ""
}

// startUnitsWith is startUnits with the way commands are run given. When
// the daemon does not start, the error carries its own last words from the
// journal (why it stopped: a database it cannot reach, a key it refuses),
// not only systemctl's advice to go and read them.
func startUnitsWith(ctx context.Context, run func(ctx context.Context, name string, args ...string) ([]byte, error)) error {
	since := "@" + strconv.FormatInt(time.Now().Add(-time.Second).Unix(), 10)
	for _, args := range [][]string{
		{"restart", "tunnelsvc.service"},
		strings.Fields(strings.TrimPrefix(startLine, "systemctl ")),
	} {
		out, err := run(ctx, "systemctl", args...)
		if err == nil {
			continue
		}
		msg := fmt.Sprintf("systemctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		if args[1] == "tunnelsvc.service" {
			if log := daemonSaid(ctx, run, since); log != "" {
				msg += "\ntunnelsvc.service said:\n" + log
			}
		}
		return errors.New(msg)
	}
	return nil
}
