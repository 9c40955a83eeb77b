package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// executableRSS is how many kB of this process's own executable are in
// its memory (the Rss of its mappings in /proc/self/smaps).
func executableRSS(t *testing.T) int {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kb, ours := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) >= 5 && strings.Contains(fields[0], "-"):
			ours = len(fields) >= 6 && fields[5] == exe
		case ours && fields[0] == "Rss:":
			n, _ := strconv.Atoi(fields[1])
			kb += n
		}
	}
	return kb
}

func TestReleaseStartupPages(t *testing.T) {
	before := executableRSS(t)
	releaseStartupPages()
	after := executableRSS(t)
	t.Logf("the test binary's pages in memory: %d kB before, %d kB after", before, after)
	if before == 0 || after > before*3/4 {
		t.Fatalf("the executable's pages in memory went from %d kB to %d kB; want at least a quarter of them released", before, after)
	}
}
