package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// releaseStartupPages is called once the daemon serves. Starting it runs
// every package's initialisation, spread over the whole executable, and
// the kernel reads 128 KB around each page first used: by then about 20
// of its 25 MB sit in memory, most of it code that only ran once. The
// daemon hands those pages back (MADV_PAGEOUT: clean file pages, dropped
// at no cost) and asks that its executable be read a page at a time from
// now on (MADV_RANDOM), so what stays in memory is what it runs. Both are
// advice: a kernel without them changes nothing.
func releaseStartupPages() {
	exe, err := os.Executable()
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "00403000-00eea000 r-xp 00003000 08:01 1234 /usr/bin/tunnelsvc"
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != exe || fields[1][1] == 'w' {
			continue // only the executable's read-only parts: code and constants
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		for _, advice := range []uintptr{unix.MADV_RANDOM, unix.MADV_PAGEOUT} {
			// By address: the mapping is not the daemon's memory to slice.
			unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), advice)
		}
	}
}
