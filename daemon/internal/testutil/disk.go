package testutil

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size (as mount(8) takes it: "8m") on a new
// directory and unmounts it when the test ends. Mounting needs root with
// CAP_SYS_ADMIN: without it the test is skipped, saying so.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_ADMIN) to mount a tmpfs for the data directory")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("mount -t tmpfs: %v (needs CAP_SYS_ADMIN)", err)
		}
		t.Fatalf("mount -t tmpfs %s: %v", dir, err)
	}
	// Registered after t.TempDir, so it runs before the directory is
	// removed; detached, so a file a process still holds does not keep it.
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("umount %s: %v", dir, err)
		}
	})
	return dir
}

// FillDisk writes a file in dir until its file system has no room left
// (ENOSPC) and returns the file's path; removing it gives the room back.
func FillDisk(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		_, err := f.Write(chunk)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatalf("filling %s: %v", dir, err)
		}
	}
	// What a 64 KiB write left: the last bytes, one at a time.
	for {
		if _, err := f.Write(chunk[:1]); err != nil {
			break
		}
	}
	return path
}
