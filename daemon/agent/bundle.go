package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// A machine bundle is a gzip-compressed tar of exactly these regular files
// (contract of issue 26, section 1). Each lands at Target under the machine's
// root with Mode.
type bundleFile struct {
	Name   string
	Target string // "" for VERSION, which is not installed as a file
	Mode   uint32
}

var bundleFiles = []bundleFile{
	{Name: "VERSION", Mode: 0o644},
	{Name: "tunnel-agent", Target: "/usr/local/bin/tunnel-agent", Mode: 0o755},
	{Name: "revtunnel-client", Target: "/usr/local/bin/revtunnel-client", Mode: 0o755},
	{Name: "revtunnel-client.service", Target: "/etc/systemd/system/revtunnel-client.service", Mode: 0o644},
	{Name: "tunnel-agent.service", Target: "/etc/systemd/system/tunnel-agent.service", Mode: 0o644},
	{Name: "sudoers-tunnel-agent", Target: "/etc/sudoers.d/tunnel-agent", Mode: 0o440},
}

// Limits on what apply-update unpacks: the binaries are tens of MiB, so
// these only stop a bundle from filling the root helper's memory.
const (
	MaxBundleBytes     = 256 << 20 // the compressed bundle (POST /update's size)
	maxBundleFileBytes = 128 << 20
	maxBundleTotal     = 320 << 20
)

// systemctlMark is where the sudoers template wants systemctl's absolute
// path, which differs between distributions (/bin or /usr/bin).
const systemctlMark = "@SYSTEMCTL@"

// versionRe is what a bundle version may look like. It ends up in key=value
// lines and in rollback.sh, so it is kept to characters that need no quoting.
var versionRe = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z._+~-]{0,63}$`)

// ValidVersion tells whether v can be a bundle version.
func ValidVersion(v string) bool { return versionRe.MatchString(v) }

var sha256Re = regexp.MustCompile(`^[0-9a-f]{64}$`)

// UpdateHeader is the first line apply-update reads on its stdin, before the
// bundle's bytes: what the daemon announced over the signed channel.
type UpdateHeader struct {
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
	Size    int64  `json:"size"`
}

func (h UpdateHeader) check() error {
	switch {
	case h.Version == "":
		return errors.New(`"version" is required`)
	case h.SHA256 == "":
		return errors.New(`"sha256" is required`)
	case h.Size == 0:
		return errors.New(`"size" is required`)
	case !ValidVersion(h.Version):
		return fmt.Errorf("version %q is not a bundle version", h.Version)
	case !sha256Re.MatchString(h.SHA256):
		return fmt.Errorf("sha256 %q is not 64 lowercase hex digits", h.SHA256)
	case h.Size < 1 || h.Size > MaxBundleBytes:
		return fmt.Errorf("size %d is not between 1 and %d bytes", h.Size, MaxBundleBytes)
	}
	return nil
}

// readChecked reads exactly h.Size bytes from r whose SHA-256 is h.SHA256,
// in the words the dashboard shows when it is not so.
func readChecked(r io.Reader, h UpdateHeader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, h.Size+1))
	if err != nil {
		return nil, err
	}
	if err := checkSize(int64(len(data)), h.Size); err != nil {
		return nil, err
	}
	if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != h.SHA256 {
		return nil, shaMismatch(h.SHA256, hex.EncodeToString(got[:]))
	}
	return data, nil
}

func checkSize(got, want int64) error {
	if got > want {
		return fmt.Errorf("bundle refused: size mismatch (expected %d bytes, got more); nothing was changed", want)
	}
	if got != want {
		return fmt.Errorf("bundle refused: size mismatch (expected %d bytes, got %d); nothing was changed", want, got)
	}
	return nil
}

func shaMismatch(want, got string) error {
	return fmt.Errorf("bundle refused: SHA-256 mismatch (expected %s, got %s); nothing was changed", want, got)
}

// readBundle unpacks a bundle into memory: every name of bundleFiles once,
// regular files only, nothing else. VERSION must name version.
func readBundle(data []byte, version string) (map[string][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("bundle refused: not gzip: %v", err)
	}
	known := map[string]bool{}
	for _, f := range bundleFiles {
		known[f.Name] = true
	}
	files := map[string][]byte{}
	var total int64
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("bundle refused: not a tar archive: %v", err)
		}
		switch {
		case !known[hdr.Name]:
			return nil, fmt.Errorf("bundle refused: unexpected entry %q (a bundle holds exactly %s)", hdr.Name, bundleNames())
		case hdr.Typeflag != tar.TypeReg:
			return nil, fmt.Errorf("bundle refused: %q is not a regular file", hdr.Name)
		case files[hdr.Name] != nil:
			return nil, fmt.Errorf("bundle refused: %q appears twice", hdr.Name)
		case hdr.Size > maxBundleFileBytes:
			return nil, fmt.Errorf("bundle refused: %q is larger than %d bytes", hdr.Name, maxBundleFileBytes)
		}
		total += hdr.Size
		if total > maxBundleTotal {
			return nil, fmt.Errorf("bundle refused: its files are larger than %d bytes together", maxBundleTotal)
		}
		b, err := io.ReadAll(io.LimitReader(tr, maxBundleFileBytes+1))
		if err != nil {
			return nil, fmt.Errorf("bundle refused: %q: %v", hdr.Name, err)
		}
		files[hdr.Name] = b
	}
	for _, f := range bundleFiles {
		if files[f.Name] == nil {
			return nil, fmt.Errorf("bundle refused: %q is missing", f.Name)
		}
	}
	if got := strings.TrimSpace(string(files["VERSION"])); got != version {
		return nil, fmt.Errorf("bundle refused: its VERSION is %q, not the announced %q", got, version)
	}
	if !bytes.Contains(files["sudoers-tunnel-agent"], []byte(systemctlMark)) {
		return nil, fmt.Errorf("bundle refused: sudoers-tunnel-agent has no %s", systemctlMark)
	}
	return files, nil
}

func bundleNames() string {
	var names []string
	for _, f := range bundleFiles {
		names = append(names, f.Name)
	}
	return strings.Join(names, ", ")
}
