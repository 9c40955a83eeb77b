package store

import (
	"errors"
	"syscall"
)

// inotifyWatch is a non-blocking inotify instance on the data directory.
type inotifyWatch struct{ fd int }

func watchDir(dir string) (watcher, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	const mask = syscall.IN_MODIFY | syscall.IN_CLOSE_WRITE | syscall.IN_CREATE | syscall.IN_DELETE |
		syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO | syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF
	if _, err := syscall.InotifyAddWatch(fd, dir, mask); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return &inotifyWatch{fd: fd}, nil
}

// written drains the queued events: any event, or any error other than an
// empty queue, counts as a write.
func (w *inotifyWatch) written() bool {
	var buf [4096]byte
	seen := false
	for i := 0; i < 64; i++ {
		n, err := syscall.Read(w.fd, buf[:])
		if errors.Is(err, syscall.EAGAIN) {
			return seen
		}
		if err != nil || n <= 0 {
			return true
		}
		seen = true
	}
	return true
}

func (w *inotifyWatch) close() { syscall.Close(w.fd) }
