package auth

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// SetupCodeFile is the file in the data dir that holds the one-time setup
// code: proof, for a setup from off the box, that the caller can read the
// box's files or logs.
const SetupCodeFile = "setup-code"

// codeAlphabet avoids look-alike characters (0/O, 1/I/L).
const codeAlphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"

// LoadOrCreateSetupCode returns the setup code, creating it on first use.
func LoadOrCreateSetupCode(dataDir string) (code string, created bool, err error) {
	path := filepath.Join(dataDir, SetupCodeFile)
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	buf := make([]byte, 12)
	if _, err := rand.Read(buf); err != nil {
		return "", false, err
	}
	var sb strings.Builder
	for i, b := range buf {
		if i > 0 && i%4 == 0 {
			sb.WriteByte('-')
		}
		sb.WriteByte(codeAlphabet[int(b)%len(codeAlphabet)])
	}
	code = sb.String()
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// Another process created it first; theirs is the code.
		return LoadOrCreateSetupCode(dataDir)
	}
	if err != nil {
		return "", false, err
	}
	if _, err := fmt.Fprintln(f, code); err != nil {
		f.Close()
		return "", false, err
	}
	return code, true, f.Close()
}

// ReadSetupCode returns the setup code if one exists.
func ReadSetupCode(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, SetupCodeFile))
	return strings.TrimSpace(string(b)), err
}

// RemoveSetupCode deletes the code once setup is done; it is never needed again.
func RemoveSetupCode(dataDir string) error {
	err := os.Remove(filepath.Join(dataDir, SetupCodeFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
