package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Arches are the architectures a bundle exists for: those the agent is
// built for (armv7 machines get no agent, so nothing could apply a bundle).
var Arches = []string{"amd64", "arm64"}

// FileName is the bundle's name under /static/bundles.
func FileName(arch string) string { return "machine-linux-" + arch + ".tar.gz" }

// Bundle is one built bundle.
type Bundle struct {
	Version string
	// SHA256 is the hex digest of Data; Size its length.
	SHA256 string
	Size   int64
	Data   []byte
}

// epoch is every entry's mtime: the same inputs then give the same bytes,
// and so the same SHA-256, whenever and wherever the bundle is built.
var epoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// MissingError: an input of the bundle is not there (the daemon runs from a
// tree where `make build` has not run, or the package lacks it).
type MissingError struct{ Path string }

func (e *MissingError) Error() string {
	return fmt.Sprintf("%s does not exist: run `make build` (it writes the machine binaries and VERSION into bin/static) and serve with --static-dir pointing there, or install the tunnelsvc package", e.Path)
}

// Version is the bundle version: the content of <staticDir>/VERSION,
// trimmed. It is read at every call, so a package upgrade that rewrites the
// file is seen at once.
func Version(staticDir string) (string, error) {
	p := filepath.Join(staticDir, "VERSION")
	// The dashboard's machine list asks on every request: the file is read
	// again only when its size, time or inode changed (an upgrade writes a
	// new file), one stat instead of an open, a read and a close.
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", &MissingError{Path: p}
	}
	if err != nil {
		return "", err
	}
	key := versionKey{p, fi.Size(), fi.ModTime().UnixNano(), inode(fi)}
	if last := lastVersion.Load(); last != nil && last.key == key {
		return last.version, nil
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", &MissingError{Path: p}
	}
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" || strings.ContainsAny(v, " \t\r\n") {
		return "", fmt.Errorf("%s must hold one version on one line, not %q", p, string(b))
	}
	// Kept only once the file has stood for a second: file times move in
	// ticks of a few milliseconds, so a file rewritten in place within one
	// tick, with a version of the same length, would keep its key.
	if int64(len(b)) == fi.Size() && time.Since(fi.ModTime()) > time.Second {
		lastVersion.Store(&readVersion{key, v})
	}
	return v, nil
}

// versionKey names one state of a VERSION file.
type versionKey struct {
	path        string
	size, mtime int64
	ino         uint64
}

// readVersion is a version read and the file state it was read from.
type readVersion struct {
	key     versionKey
	version string
}

// lastVersion is the last version read (one VERSION file is all a daemon
// asks about).
var lastVersion atomic.Pointer[readVersion]

func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

type input struct {
	name string
	path string
	mode int64
}

func inputs(staticDir, arch string) []input {
	return []input{
		{"VERSION", filepath.Join(staticDir, "VERSION"), 0o644},
		{"tunnel-agent", filepath.Join(staticDir, "agents", "tunnel-agent-linux-"+arch), 0o755},
		{"revtunnel-client", filepath.Join(staticDir, "revtunnel", "revtunnel-client-linux-"+arch), 0o755},
	}
}

func validArch(arch string) bool {
	for _, a := range Arches {
		if a == arch {
			return true
		}
	}
	return false
}

// cache keeps the last bundle of each (staticDir, arch). Building one reads
// and compresses some 30 MB, and every machine of a fleet update, and every
// download, asks for it. The key is every input's size and mtime, checked
// at each call, so a replaced binary or VERSION is never served stale.
var cache struct {
	sync.Mutex
	m map[string]cached
}

type cached struct {
	key    string
	bundle Bundle
}

// Build returns the bundle for arch from staticDir.
func Build(staticDir, arch string) (Bundle, error) {
	if !validArch(arch) {
		return Bundle{}, fmt.Errorf("no machine bundle for linux-%s: bundles exist for %s", arch, strings.Join(Arches, " and "))
	}
	ins := inputs(staticDir, arch)
	var key strings.Builder
	for _, in := range ins {
		st, err := os.Stat(in.path)
		if errors.Is(err, fs.ErrNotExist) {
			return Bundle{}, &MissingError{Path: in.path}
		}
		if err != nil {
			return Bundle{}, err
		}
		fmt.Fprintf(&key, "%s:%d:%d;", in.path, st.Size(), st.ModTime().UnixNano())
	}
	id := staticDir + "\x00" + arch
	cache.Lock()
	defer cache.Unlock()
	if c, ok := cache.m[id]; ok && c.key == key.String() {
		return c.bundle, nil
	}
	b, err := build(staticDir, ins)
	if err != nil {
		return Bundle{}, err
	}
	if cache.m == nil {
		cache.m = map[string]cached{}
	}
	cache.m[id] = cached{key: key.String(), bundle: b}
	return b, nil
}

func build(staticDir string, ins []input) (Bundle, error) {
	version, err := Version(staticDir)
	if err != nil {
		return Bundle{}, err
	}
	var buf bytes.Buffer
	// No name and no time in the gzip header: they would change the digest.
	// The default level: on the agent and tunnel client (two Go binaries,
	// 14.5 MB) gzip -9 was 0.6 % smaller than -6 and took 3.4 times the
	// CPU (3.8 s against 1.1 s), which the first download after each
	// upgrade (and each fleet update) waits for.
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return Bundle{}, err
	}
	tw := tar.NewWriter(zw)
	add := func(name string, mode int64, data []byte) error {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)),
			ModTime: epoch, Uname: "root", Gname: "root", Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := add("VERSION", 0o644, []byte(version+"\n")); err != nil {
		return Bundle{}, err
	}
	for _, in := range ins[1:] {
		data, err := os.ReadFile(in.path)
		if err != nil {
			return Bundle{}, err
		}
		if err := add(in.name, in.mode, data); err != nil {
			return Bundle{}, err
		}
	}
	for _, f := range []struct {
		name string
		mode int64
		text string
	}{
		{"revtunnel-client.service", 0o644, ClientUnit()},
		{"tunnel-agent.service", 0o644, AgentUnit()},
		{"sudoers-tunnel-agent", 0o440, AgentSudoers()},
	} {
		if err := add(f.name, f.mode, []byte(f.text)); err != nil {
			return Bundle{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return Bundle{}, err
	}
	if err := zw.Close(); err != nil {
		return Bundle{}, err
	}
	sum := sha256.Sum256(buf.Bytes())
	return Bundle{Version: version, SHA256: hex.EncodeToString(sum[:]), Size: int64(buf.Len()), Data: buf.Bytes()}, nil
}
