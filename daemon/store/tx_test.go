package store

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestConcurrentWritersAllCommit: twenty write transactions that each hold
// the write lock for 300 ms, 6 s in all, more than SQLite's 5 s busy
// timeout. Queued on SQLite's busy handler the last of them failed with
// "database is locked"; queued in the store, every one commits.
func TestConcurrentWritersAllCommit(t *testing.T) { eachStore(t, testConcurrentWritersAllCommit) }

func testConcurrentWritersAllCommit(t *testing.T, s *Store) {
	ctx := context.Background()
	const writers = 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Tx(ctx, func(tx *Tx) error {
				if _, err := tx.exec(ctx, "INSERT INTO settings(key, value) VALUES (?, 'x')", "concurrent-"+string(rune('a'+i))); err != nil {
					return err
				}
				time.Sleep(300 * time.Millisecond)
				return nil
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a write transaction failed: %v", err)
		}
	}
	var n int
	if err := s.queryRow(ctx, "SELECT count(*) FROM settings WHERE key LIKE 'concurrent-%'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != writers {
		t.Fatalf("%d of %d writes committed", n, writers)
	}
}

// TestTxWaitHonoursContext: on SQLite, a writer queued behind another
// gives up when its context ends, and writes nothing; on PostgreSQL, it
// does not queue at all: a writer held open does not hold up another.
func TestTxWaitHonoursContext(t *testing.T) { eachStore(t, testTxWaitHonoursContext) }

func testTxWaitHonoursContext(t *testing.T, s *Store) {
	ctx := context.Background()
	if s.Engine() == "postgres" {
		held, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- s.Tx(ctx, func(*Tx) error { close(held); <-release; return nil }) }()
		<-held
		short, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := s.Tx(short, func(tx *Tx) error {
			_, err := tx.exec(short, "INSERT INTO settings(key, value) VALUES ('beside', 'x')")
			return err
		})
		close(release)
		if err != nil || <-done != nil {
			t.Fatalf("a writer beside an open one: %v", err)
		}
		return
	}
	held, release := make(chan struct{}), make(chan struct{})
	go s.Tx(ctx, func(*Tx) error { close(held); <-release; return nil })
	<-held
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := s.Tx(short, func(tx *Tx) error {
		_, err := tx.exec(short, "INSERT INTO settings(key, value) VALUES ('late', 'x')")
		return err
	})
	close(release)
	if err != context.DeadlineExceeded {
		t.Fatalf("queued writer: %v, want context.DeadlineExceeded", err)
	}
	if _, err := s.GetSetting(ctx, "late"); err != ErrNotFound {
		t.Fatalf("the writer that gave up wrote its setting (err %v)", err)
	}
}
