package revtunnel

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/atomicfile"
	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
	"github.com/tunnelsvc/tunnelsvc/daemon/revtunnel/frpconf"
	"github.com/tunnelsvc/tunnelsvc/daemon/tunnelca"
	"github.com/tunnelsvc/tunnelsvc/daemon/units"
)

// ServerConfigPath is where the server config is deployed (under --system-root).
const ServerConfigPath = "/etc/revtunnel/server.toml"

// ServerUnit is the systemd unit that runs frps.
const ServerUnit = "revtunnel-server.service"

// frps's certificate and key as the daemon deploys them (under
// --system-root), and as frps reads them: revtunnel-server.service runs
// frps as a dynamic user, so its ExecStartPre copies server.toml, the
// certificate and the key into the unit's runtime directory.
const (
	ServerCertPath  = "/etc/revtunnel/server.crt"
	ServerKeyPath   = "/etc/revtunnel/server.key"
	RuntimeCertPath = "/run/revtunnel-server/server.crt"
	RuntimeKeyPath  = "/run/revtunnel-server/server.key"
)

// UnitRestarter restarts an allow-listed systemd unit. The unit layer
// provides it; nil means there is no systemd to talk to.
type UnitRestarter interface {
	Restart(ctx context.Context, name string) error
}

// verifyTimeout bounds one `frps verify` / `frpc verify` run.
const verifyTimeout = 20 * time.Second

// Verify runs `<bin> verify -c <file>` with the config in a temporary file
// and returns the tool's own words when it refuses the config.
func Verify(ctx context.Context, bin, config string) error {
	dir, err := os.MkdirTemp("", "revtunnel-verify-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return err
	}
	return VerifyFile(ctx, bin, path)
}

// VerifyFile runs `<bin> verify -c path`. Its error carries the tool's
// message line only (cmdrun.Message).
func VerifyFile(ctx context.Context, bin, path string) error {
	ctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "verify", "-c", path).CombinedOutput()
	if err != nil {
		tool := filepath.Base(bin)
		return &ToolError{Tool: tool, Output: cmdrun.Message(tool, cmdrun.Result{Stdout: string(out), Err: err}, path)}
	}
	return nil
}

// ToolError is a refusal by frps or frpc, in its own words.
type ToolError struct {
	Tool, Output string
}

func (e *ToolError) Error() string { return e.Tool + " verify: " + e.Output }

// Deployer renders, checks, writes and applies the server config.
type Deployer struct {
	// Path is the deployed file (ServerConfigPath under the system root).
	Path string
	// FRPS is the frps binary used for `frps verify`.
	FRPS string
	// Units restarts revtunnel-server; nil skips the restart and says so.
	Units UnitRestarter
	// Params returns the current settings. Its CertFile and KeyFile are
	// where frps reads what the deployer writes at CertPath and KeyPath.
	Params func(ctx context.Context) (frpconf.ServerParams, error)
	// CA issues frps's certificate; CertPath and KeyPath are where it and
	// its key are written (0644 and 0600).
	CA                *tunnelca.Authority
	CertPath, KeyPath string
	// Host returns the server host machines dial (server_host); the
	// certificate names it beside tunnelca.ServerName. May be nil.
	Host func(ctx context.Context) (string, error)
	// Now is the clock certificates are issued and checked by.
	Now func() time.Time

	// mu serializes reconciles (start, renewal loop, settings changes), so
	// two never interleave writing a certificate and its key.
	mu sync.Mutex
	// restartOwed: a config or certificate was written but frps's restart
	// failed; the next Reconcile restarts it even when nothing changed
	// since, so the file on disk is never taken for what frps runs.
	restartOwed bool
}

func (d *Deployer) now() time.Time {
	if d.Now == nil {
		return time.Now()
	}
	return d.Now()
}

// ensureCert issues and writes a new frps certificate when the deployed one
// is missing, not from the tunnel CA, names another host or has less than
// a third of its lifetime left. It returns why it renewed ("" when it kept
// the certificate).
func (d *Deployer) ensureCert(ctx context.Context) (string, error) {
	if d.CA == nil {
		return "", errors.New("no tunnel CA to issue frps's certificate")
	}
	ca, err := d.CA.Load(ctx)
	if err != nil {
		return "", err
	}
	host := ""
	if d.Host != nil {
		if host, err = d.Host(ctx); err != nil {
			return "", fmt.Errorf("read the server host: %w", err)
		}
	}
	return keepIssued(ca, tunnelca.Names(host), d.CertPath, d.KeyPath, d.now())
}

// keepIssued issues and writes a certificate from ca for names, and its
// key, when the one at certPath is missing, not from ca, names other names,
// has less than a third of its lifetime left or does not match the key at
// keyPath. The key is written first (a certificate is never deployed
// without its key), 0600. It returns why it renewed ("" when it kept the
// certificate).
func keepIssued(ca *tunnelca.CA, names []string, certPath, keyPath string, now time.Time) (string, error) {
	old, err := os.ReadFile(certPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", certPath, err)
	}
	why := ca.RenewReason(old, names, now)
	if why == "" {
		key, err := os.ReadFile(keyPath)
		if _, kerr := tls.X509KeyPair(old, key); err == nil && kerr == nil {
			return "", nil
		}
		why = "the key file is missing or does not match the certificate"
	}
	certPEM, keyPEM, err := ca.Issue(names, now)
	if err != nil {
		return "", fmt.Errorf("issue a certificate for %s: %w", strings.Join(names, ", "), err)
	}
	if err := atomicfile.Write(keyPath, keyPEM, 0o600); err != nil {
		return "", err
	}
	if err := atomicfile.Write(certPath, certPEM, 0o644); err != nil {
		return "", err
	}
	return why, nil
}

// Render returns the config as it would be deployed now, with the custom
// block left empty (the diagnostic view, spec §4.4).
func (d *Deployer) Render(ctx context.Context) (string, error) {
	p, err := d.Params(ctx)
	if err != nil {
		return "", err
	}
	return frpconf.ServerConfig(p, "")
}

// Reconcile renews frps's certificate when it must (see ensureCert),
// renders the config keeping the deployed file's custom block, checks it
// with `frps verify`, writes it atomically and restarts revtunnel-server,
// each step only when something changed. A refused config leaves the
// deployed file as it was. The daemon calls it at start, on settings
// changes and every tunnelca.CheckInterval.
func (d *Deployer) Reconcile(ctx context.Context) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.Params(ctx)
	if err != nil {
		return "", err
	}
	renewed, err := d.ensureCert(ctx)
	if err != nil {
		return "", fmt.Errorf("frps certificate: %w", err)
	}
	old, err := os.ReadFile(d.Path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", d.Path, err)
	}
	custom, ok := frpconf.CustomBlock(string(old))
	if len(old) > 0 && !ok {
		// Not a file we wrote (or its markers were removed): keep a copy
		// rather than silently dropping what the operator had there.
		if err := os.WriteFile(d.Path+".bak", old, 0o600); err != nil {
			return "", fmt.Errorf("back up %s: %w", d.Path, err)
		}
	}
	next, err := frpconf.ServerConfig(p, custom)
	if err != nil {
		return "", err
	}
	what := "configuration written"
	switch {
	case bytes.Equal(old, []byte(next)) && renewed == "" && !d.restartOwed:
		return "revtunnel-server configuration unchanged", nil
	case bytes.Equal(old, []byte(next)) && renewed == "":
		what = "configuration written earlier"
	case bytes.Equal(old, []byte(next)):
		what = "certificate renewed (" + renewed + ")"
	default:
		if err := Verify(ctx, d.FRPS, next); err != nil {
			return "", err
		}
		if err := atomicfile.Write(d.Path, []byte(next), 0o640); err != nil {
			return "", err
		}
		if renewed != "" {
			what = "configuration written, certificate renewed (" + renewed + ")"
		}
	}
	if d.Units == nil {
		return "revtunnel-server " + what + "; no unit manager, so revtunnel-server was not restarted", nil
	}
	// frps reads its certificate only at start: a renewal needs a restart.
	if err := d.Units.Restart(ctx, ServerUnit); errors.Is(err, units.ErrUnavailable) {
		// No systemd here (a development box): nothing runs frps as a
		// unit, so nothing is owed; whoever runs it reads the file.
		d.restartOwed = false
		return "revtunnel-server " + what + "; systemd is not available, so revtunnel-server was not restarted", nil
	} else if err != nil {
		d.restartOwed = true
		return "", fmt.Errorf("revtunnel-server %s, but restarting %s failed: %w", what, ServerUnit, err)
	}
	d.restartOwed = false
	return "revtunnel-server " + what + " and revtunnel-server restarted", nil
}
