package banner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
)

// check asks fail2ban whether the configuration is valid with files (path ->
// content) in place, without touching the live directory: it tests a copy
// of ConfDir with the candidates laid over it.
func (s *Service) check(ctx context.Context, files map[string][]byte) error {
	if p := s.configProblem(); p != "" {
		return &ApplyError{Msg: p}
	}
	tmp, err := os.MkdirTemp("", "tunnelsvc-fail2ban-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := copyTree(s.confDir, tmp); err != nil {
		return fmt.Errorf("copy %s for the check: %w", s.confDir, err)
	}
	var own []string
	for path, b := range files {
		rel, err := filepath.Rel(s.confDir, path)
		if err != nil || strings.HasPrefix(rel, "..") {
			return fmt.Errorf("%s is outside %s", path, s.confDir)
		}
		dst := filepath.Join(tmp, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return err
		}
		own = append(own, dst)
	}
	res := s.run.Run(ctx, "fail2ban-client", "-c", tmp, "--test")
	if errors.Is(res.Err, cmdrun.ErrNotInstalled) {
		return &ApplyError{Msg: "fail2ban is not installed (no fail2ban-client)"}
	}
	if res.Err != nil {
		words := cmdrun.Message("fail2ban", res, own...)
		return &ApplyError{Msg: "fail2ban refused the configuration: " + strings.ReplaceAll(words, tmp, s.confDir)}
	}
	return nil
}

// copyTree copies the regular files and directories under src into dst,
// following symlinks to files (Debian's conf dir has none, others may).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a dangling symlink
			}
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}
