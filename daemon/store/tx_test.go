package store

import (
	"context"
	"fmt"
	"slices"
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
	atOnce(t, writers, func(i int) error {
		return s.Tx(ctx, func(tx *Tx) error {
			if _, err := tx.exec(ctx, "INSERT INTO settings(key, value) VALUES (?, 'x')", "concurrent-"+string(rune('a'+i))); err != nil {
				return err
			}
			time.Sleep(300 * time.Millisecond)
			return nil
		})
	})
	var n int
	if err := s.queryRow(ctx, "SELECT count(*) FROM settings WHERE key LIKE 'concurrent-%'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != writers {
		t.Fatalf("%d of %d writes committed", n, writers)
	}
}

// TestTxWaitHonoursContext: a writer queued behind another of the same
// process gives up when its context ends, and writes nothing, on either
// engine. On PostgreSQL another process's writer (another edge) does not
// queue behind it.
func TestTxWaitHonoursContext(t *testing.T) {
	eachEngine(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open()
		held, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- s.Tx(ctx, func(*Tx) error { close(held); <-release; return nil }) }()
		<-held
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		err := s.Tx(short, func(tx *Tx) error {
			_, err := tx.exec(short, "INSERT INTO settings(key, value) VALUES ('late', 'x')")
			return err
		})
		if err != context.DeadlineExceeded {
			t.Fatalf("queued writer: %v, want context.DeadlineExceeded", err)
		}
		if db.engine == "postgres" {
			other, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			err := db.open().Tx(other, func(tx *Tx) error {
				_, err := tx.exec(other, "INSERT INTO settings(key, value) VALUES ('beside', 'x')")
				return err
			})
			if err != nil {
				t.Fatalf("another edge's writer beside an open one: %v", err)
			}
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetSetting(ctx, "late"); err != ErrNotFound {
			t.Fatalf("the writer that gave up wrote its setting (err %v)", err)
		}
	})
}

// TestOneEdgesWritersDoNotConflict: writers of one edge that each read
// what the others write (as creating a tunnel reads every tunnel to place
// it) run one after another on either engine: each sees every write before
// it, and none is run again. On PostgreSQL, run side by side as serializable
// transactions, they conflicted and were run again until one ran out of
// attempts (a 500 for a valid POST /api/tunnels at 1,000 machines).
func TestOneEdgesWritersDoNotConflict(t *testing.T) { eachStore(t, testOneEdgesWritersDoNotConflict) }

func testOneEdgesWritersDoNotConflict(t *testing.T, s *Store) {
	ctx := context.Background()
	const writers = 16
	seen := make(chan int, writers)
	atOnce(t, writers, func(i int) error {
		var n int // what the attempt that commits saw
		err := s.Tx(ctx, func(tx *Tx) error {
			if err := tx.queryRow(ctx, "SELECT count(*) FROM settings WHERE key LIKE 'placed-%'").Scan(&n); err != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond) // deciding where the new one goes
			_, err := tx.exec(ctx, "INSERT INTO settings(key, value) VALUES (?, 'x')", fmt.Sprintf("placed-%02d", i))
			return err
		})
		if err == nil {
			seen <- n
		}
		return err
	})
	close(seen)
	var counts []int
	for n := range seen {
		counts = append(counts, n)
	}
	slices.Sort(counts)
	for i, n := range counts {
		if n != i {
			t.Fatalf("the writers saw %v of the others' writes: want 0 to %d, each once", counts, writers-1)
		}
	}
	if r := s.TxRetries(); r != 0 {
		t.Fatalf("%d transactions run again for a conflict among one edge's own writes", r)
	}
}

// atOnce runs write(0) … write(n-1) side by side, waits for all of them,
// and fails the test, naming each, if any failed.
func atOnce(t *testing.T, n int, write func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = write(i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Errorf("a write transaction failed: %v", err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}
