package banner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/tunnelsvc/tunnelsvc/daemon/cmdrun"
)

// check asks fail2ban whether the configuration is valid with files (path ->
// content) in place, without touching the live directory: it tests a copy
// of ConfDir with the candidates laid over it.
func (s *Service) check(ctx context.Context, files map[string][]byte) error {
	if _, err := os.Stat(filepath.Join(s.confDir, "jail.conf")); err != nil {
		return &ApplyError{Msg: fmt.Sprintf("fail2ban is not installed: %s has no jail.conf", s.confDir)}
	}
	tmp, err := os.MkdirTemp("", "tunnelsvc-fail2ban-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := copyTree(s.confDir, tmp); err != nil {
		return fmt.Errorf("copy %s for the check: %w", s.confDir, err)
	}
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
	}
	res := s.run.Run(ctx, "fail2ban-client", "-c", tmp, "--test")
	if errors.Is(res.Err, cmdrun.ErrNotInstalled) {
		return &ApplyError{Msg: "fail2ban is not installed (no fail2ban-client)"}
	}
	if res.Err != nil {
		words := fail2banErrors(res)
		return &ApplyError{Msg: "fail2ban refused the configuration: " + strings.ReplaceAll(words, tmp, s.confDir)}
	}
	return nil
}

// logPrefix is fail2ban's log line prefix: "2026-01-02 03:04:05,678 fail2ban.x [123]: ERROR   ".
var logPrefix = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ \S+\s+\[\d+\]: (\w+)\s+`)

// fail2banErrors extracts fail2ban's own explanation of a failure: its ERROR
// lines without the log prefix, else whatever it printed.
func fail2banErrors(res cmdrun.Result) string {
	var msgs []string
	text := res.Stderr + "\n" + res.Stdout
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		m := logPrefix.FindStringSubmatch(lines[i])
		if m == nil || m[1] != "ERROR" {
			continue
		}
		msg := strings.TrimSpace(lines[i][len(m[0]):])
		// Continuation lines (a parser's file and line) belong to the message.
		for i+1 < len(lines) && lines[i+1] != "" && !logPrefix.MatchString(lines[i+1]) {
			i++
			msg += " " + strings.TrimSpace(lines[i])
		}
		msgs = append(msgs, msg)
	}
	if len(msgs) == 0 {
		return res.Words()
	}
	return strings.Join(msgs, "; ")
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
