package store

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/mattn/go-sqlite3"
	"golang.org/x/sys/unix"
)

// DiskFull reports whether err is a write that failed for lack of space:
// SQLite's SQLITE_FULL ("database or disk is full"), an OS error SQLite
// passed on, PostgreSQL's disk_full (SQLSTATE 53100, "could not extend
// file ...: No space left on device"), or ENOSPC or EDQUOT from a file
// write, however wrapped.
func DiskFull(err error) bool {
	if err == nil {
		return false
	}
	var se sqlite3.Error
	if errors.As(err, &se) {
		return se.Code == sqlite3.ErrFull || se.SystemErrno == syscall.ENOSPC || se.SystemErrno == syscall.EDQUOT
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == pgDiskFull
	}
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// pgDiskFull is PostgreSQL's SQLSTATE disk_full.
const pgDiskFull = "53100"

// FullError says the data directory's file system has no room for the
// daemon's writes.
type FullError struct{ Dir string }

func (e *FullError) Error() string { return "data disk full: " + e.Dir }

// Space is the room left on the data directory's file system.
type Space struct {
	Dir string
	// Free is how many bytes the daemon may still write there. As root it
	// counts every free block, the reserve ext4 keeps for root (5 % by
	// default) included, since root's writes may fill it; otherwise the
	// blocks free to everyone (df's "Avail").
	Free uint64
	// Size is the file system's size in bytes.
	Size uint64
	// Full: writes fail for lack of space (see Store.Space).
	Full bool
}

// Probing a file system that refused a write: the probe writes probeBytes
// in a file of its own (and removes it), at most once per probeEvery.
const (
	probeBytes = 64 << 10
	probeEvery = 2 * time.Second
	probeFile  = ".space-probe"
)

// exec runs one write statement outside a transaction and notes whether it
// failed for lack of space or changed something (see noteWrite).
func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	query, args = s.bind(query, args)
	res, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		s.noteWrite(err)
		return res, err
	}
	// A statement that matched nothing wrote nothing: it says nothing
	// about the room left, nor is it a change.
	if n, _ := res.RowsAffected(); n > 0 {
		s.noteWrite(nil)
		s.wrote(ctx)
	}
	return res, err
}

// noteWrite remembers a write that failed for lack of space, and forgets it
// at the next write that succeeded. Other failures change nothing.
func (s *Store) noteWrite(err error) {
	switch {
	case err == nil:
		if s.fullAt.Load() != 0 {
			s.fullAt.Store(0)
		}
	case DiskFull(err):
		s.fullAt.Store(time.Now().UnixNano())
	}
}

// Space measures the data directory's file system (one statfs) and says
// whether it is full: nothing is free for the daemon, or the last write
// failed for lack of space and none has succeeded since. A file system
// that refused a write but shows room again (space was freed, or it
// counts its room otherwise than statfs does: quotas, btrfs) is probed in
// the background by writing a small file; when that works the failure is
// forgotten and the next call says so, with no write of the daemon's own
// needed first. Cheap enough for every /healthz.
func (s *Store) Space() (Space, error) {
	failed := s.fullAt.Load() != 0
	sp := Space{Dir: s.dir, Full: failed}
	var st unix.Statfs_t
	if err := unix.Statfs(s.dir, &st); err != nil {
		return sp, err
	}
	free := st.Bavail
	if os.Geteuid() == 0 {
		free = st.Bfree
	}
	sp.Free, sp.Size = free*uint64(st.Bsize), st.Blocks*uint64(st.Bsize)
	sp.Full = sp.Free == 0 || failed
	if failed && sp.Free >= probeBytes {
		s.probeSoon()
	}
	return sp, nil
}

// Writable is nil, or a *FullError while Space says the data directory's
// file system is full. A statfs that fails only leaves the last write's
// word.
func (s *Store) Writable() error {
	if sp, _ := s.Space(); sp.Full {
		return &FullError{Dir: s.dir}
	}
	return nil
}

// probeSoon starts a probe unless one runs or ran within probeEvery.
func (s *Store) probeSoon() {
	now := time.Now().UnixNano()
	last := s.probedAt.Load()
	if now-last < int64(probeEvery) || !s.probedAt.CompareAndSwap(last, now) || !s.probing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.probing.Store(false)
		// A write that failed after the probe started stays remembered.
		started := time.Now().UnixNano()
		if err := writeProbe(s.dir); err != nil {
			s.noteWrite(err)
			return
		}
		if at := s.fullAt.Load(); at != 0 && at <= started {
			s.fullAt.CompareAndSwap(at, 0)
		}
	}()
}

// writeProbe writes probeBytes to a file of its own in dir, synced, and
// removes it.
func writeProbe(dir string) error {
	path := filepath.Join(dir, probeFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	_, err = f.Write(make([]byte, probeBytes))
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}
