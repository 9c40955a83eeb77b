package store

import (
	"syscall"
	"unsafe"
)

// inotifyWatch is a non-blocking inotify instance on the data directory.
// buf is only used under the changes' lock.
type inotifyWatch struct {
	fd  int
	buf [4096]byte
}

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
// empty queue, counts as a write. Every cached read asks (several per
// dashboard request), so the read is a raw system call: on a non-blocking
// descriptor it returns at once, and needs none of the scheduler's
// bookkeeping around a call that may block.
func (w *inotifyWatch) written() bool {
	seen := false
	for i := 0; i < 64; i++ {
		n, _, errno := syscall.RawSyscall(syscall.SYS_READ, uintptr(w.fd), uintptr(unsafe.Pointer(&w.buf[0])), uintptr(len(w.buf)))
		if errno == syscall.EAGAIN {
			return seen
		}
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 || int(n) <= 0 {
			return true
		}
		seen = true
	}
	return true
}

func (w *inotifyWatch) close() { syscall.Close(w.fd) }
