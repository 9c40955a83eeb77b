package tunnelsvc

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docFiles are the README and every guide.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("docs/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("no guides in docs/: %v", err)
	}
	return append([]string{"README.md"}, files...)
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpan  = regexp.MustCompile("(?s)```.*?```|`[^`\n]+`")
	makeCall  = regexp.MustCompile(`(?:^|[\s;(&|])make ([a-z][a-z0-9-]*)`)
	heading   = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	slugStrip = regexp.MustCompile(`[^a-z0-9 _-]`)
)

// slug is the anchor a Markdown heading gets on the forge.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = slugStrip.ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// TestDocsLinks: every relative link in the README and the guides names a
// file that exists, and an anchor that one of its headings makes.
func TestDocsLinks(t *testing.T) {
	for _, f := range docFiles(t) {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// Code shows text as it is; a `](` inside it is no link.
		prose := codeSpan.ReplaceAllString(string(text), "")
		for _, m := range mdLink.FindAllStringSubmatch(prose, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			resolved := f
			if path != "" {
				resolved = filepath.Join(filepath.Dir(f), path)
			}
			body, err := os.ReadFile(resolved)
			if err != nil {
				if fi, serr := os.Stat(resolved); serr == nil && fi.IsDir() {
					continue
				}
				t.Errorf("%s: link %q: %s does not exist", f, target, resolved)
				continue
			}
			if anchor == "" {
				continue
			}
			found := false
			for _, h := range heading.FindAllStringSubmatch(string(body), -1) {
				if slug(h[1]) == anchor {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: link %q: no heading in %s makes the anchor #%s", f, target, resolved, anchor)
			}
		}
	}
}

// TestDocsMakeTargets: every `make <target>` the docs show exists in the
// Makefile (asked of make itself, so pattern rules count too).
func TestDocsMakeTargets(t *testing.T) {
	seen := map[string]string{}
	for _, f := range docFiles(t) {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, code := range codeSpan.FindAllString(string(text), -1) {
			for _, m := range makeCall.FindAllStringSubmatch(code, -1) {
				seen[m[1]] = f
			}
		}
	}
	if len(seen) < 3 {
		t.Fatalf("found only %d make targets in the docs; the scan is broken", len(seen))
	}
	for target, f := range seen {
		// -q: question mode, runs nothing; exit 2 means make does not know it.
		cmd := exec.Command("make", "-q", "--no-print-directory", target)
		out, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() == 2 && strings.Contains(string(out), "No rule to make target") {
			t.Errorf("%s names `make %s`, which the Makefile does not have", f, target)
		}
	}
}

// TestDocsLayout: docs/development.md names every Go package of ours, so
// the layout table grows with the code.
func TestDocsLayout(t *testing.T) {
	dev, err := os.ReadFile("docs/development.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "./daemon/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, _ := os.Getwd()
	for _, dir := range strings.Fields(string(out)) {
		rel, _ := filepath.Rel(root, dir)
		if !strings.Contains(string(dev), "`"+filepath.ToSlash(rel)+"`") {
			t.Errorf("docs/development.md does not describe the package %s", rel)
		}
	}
}

// TestReadmeIsAFrontDoor: the README stays short; the rest lives in docs/.
func TestReadmeIsAFrontDoor(t *testing.T) {
	text, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(text), "\n"); n > 150 {
		t.Fatalf("README.md has %d lines; keep it under 150 and move details to a guide in docs/", n)
	}
	for _, want := range []string{"make run", "make test", "apt install", "dnf install"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("README.md does not show %q", want)
		}
	}
}
