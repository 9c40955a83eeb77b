package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// Speed test states.
const (
	SpeedTestRunning = "running"
	SpeedTestDone    = "done"
	SpeedTestFailed  = "failed"
)

// ErrSpeedTestRunning: a speed test of the machine is running already
// (on this edge or another).
var ErrSpeedTestRunning = errors.New("a speed test of the machine is running")

// SpeedTestRetention is how long speed tests are kept.
const SpeedTestRetention = 90 * 24 * time.Hour

// SpeedTest is one speed test of a machine's link through its tunnel. The
// measurements are nil until measured.
type SpeedTest struct {
	ID         int64
	MachineID  int64
	Edge       string
	State      string
	Phase      string
	Seconds    int
	StartedAt  time.Time
	FinishedAt *time.Time
	// DownloadKbps and UploadKbps: the steady rates, in kbit/s.
	DownloadKbps, UploadKbps *int64
	// RTTMicros is the median round trip.
	RTTMicros    *int64
	MTU, Payload *int
	Error        string
}

// StartSpeedTest stores t as running and returns its id: ErrSpeedTestRunning
// while another test of the machine runs, ErrNotFound for an unknown
// machine.
func (s *Store) StartSpeedTest(ctx context.Context, t SpeedTest) (int64, error) {
	id, err := s.insertID(ctx, `INSERT INTO speedtests(machine_id, edge, state, phase, seconds, started_at)
		SELECT id, ?, ?, ?, ?, ? FROM machines WHERE id = ?`,
		t.Edge, SpeedTestRunning, t.Phase, t.Seconds, t.StartedAt.UnixMilli(), t.MachineID)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, ErrNotFound
	case isUniqueViolation(err):
		return 0, ErrSpeedTestRunning
	}
	return id, err
}

// SetSpeedTestPhase records the phase a running test is in.
func (s *Store) SetSpeedTestPhase(ctx context.Context, id int64, phase string) error {
	_, err := s.exec(ctx, "UPDATE speedtests SET phase = ? WHERE id = ? AND state = ?", phase, id, SpeedTestRunning)
	return err
}

// FinishSpeedTest records how test t ended: its state (done or failed),
// what it measured, its error and when (FinishedAt, required). A test no longer running (another
// edge gave it up) is left as it is: ErrNotFound.
func (s *Store) FinishSpeedTest(ctx context.Context, t SpeedTest) error {
	if t.FinishedAt == nil {
		// A test without an end still holds its machine (speedtests_running).
		return errors.New("a finished speed test needs its end")
	}
	return affectOne(s.exec(ctx, `UPDATE speedtests SET state = ?, phase = '', finished_at = ?, download_kbps = ?, upload_kbps = ?,
		rtt_us = ?, mtu = ?, payload = ?, error = ? WHERE id = ? AND state = ?`,
		t.State, t.FinishedAt.UnixMilli(), t.DownloadKbps, t.UploadKbps, t.RTTMicros, t.MTU, t.Payload, t.Error, t.ID, SpeedTestRunning))
}

// AbandonSpeedTests marks failed, with why, the running tests started
// before cutoff, and those of edge (when not "") whose id keep does not
// name: tests whose runner is gone. It returns how many it marked.
func (s *Store) AbandonSpeedTests(ctx context.Context, cutoff time.Time, edge string, keep func(id int64) bool, why string, now time.Time) (int, error) {
	rows, err := s.query(ctx, "SELECT id, edge, started_at FROM speedtests WHERE state = ?", SpeedTestRunning)
	if err != nil {
		return 0, err
	}
	var gone []int64
	for rows.Next() {
		var id, started int64
		var e string
		if err := rows.Scan(&id, &e, &started); err != nil {
			rows.Close()
			return 0, err
		}
		if started < cutoff.UnixMilli() || (edge != "" && e == edge && !keep(id)) {
			gone = append(gone, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, id := range gone {
		if _, err := s.exec(ctx, "UPDATE speedtests SET state = ?, phase = '', finished_at = ?, error = ? WHERE id = ? AND state = ?",
			SpeedTestFailed, now.UnixMilli(), why, id, SpeedTestRunning); err != nil {
			return 0, err
		}
	}
	return len(gone), nil
}

// ListSpeedTests lists machine id's tests: the running one first, then
// newest first, at most limit.
func (s *Store) ListSpeedTests(ctx context.Context, machineID int64, limit int) ([]SpeedTest, error) {
	rows, err := s.query(ctx, `SELECT id, machine_id, edge, state, phase, seconds, started_at, finished_at,
		download_kbps, upload_kbps, rtt_us, mtu, payload, error FROM speedtests WHERE machine_id = ?
		ORDER BY CASE WHEN state = ? THEN 0 ELSE 1 END, started_at DESC, id DESC LIMIT ?`, machineID, SpeedTestRunning, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []SpeedTest{}
	for rows.Next() {
		var t SpeedTest
		var started int64
		var finished, down, up, rtt, mtu, payload sql.NullInt64
		if err := rows.Scan(&t.ID, &t.MachineID, &t.Edge, &t.State, &t.Phase, &t.Seconds, &started, &finished,
			&down, &up, &rtt, &mtu, &payload, &t.Error); err != nil {
			return nil, err
		}
		t.StartedAt = time.UnixMilli(started).UTC()
		if finished.Valid {
			at := time.UnixMilli(finished.Int64).UTC()
			t.FinishedAt = &at
		}
		t.DownloadKbps, t.UploadKbps, t.RTTMicros = ptr64(down), ptr64(up), ptr64(rtt)
		t.MTU, t.Payload = ptrInt(mtu), ptrInt(payload)
		out = append(out, t)
	}
	return out, rows.Err()
}

func ptr64(n sql.NullInt64) *int64 {
	if !n.Valid {
		return nil
	}
	return &n.Int64
}

func ptrInt(n sql.NullInt64) *int {
	if !n.Valid {
		return nil
	}
	v := int(n.Int64)
	return &v
}

// PruneSpeedTests deletes the tests that ended before cutoff.
func (s *Store) PruneSpeedTests(ctx context.Context, cutoff time.Time) (int64, error) {
	res, err := s.exec(ctx, "DELETE FROM speedtests WHERE state <> ? AND started_at < ?", SpeedTestRunning, cutoff.UnixMilli())
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
