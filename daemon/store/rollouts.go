package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// TopicRollouts is announced when a fleet update starts, moves or ends.
const TopicRollouts = "rollouts"

// Rollout states.
const (
	RolloutRunning = "running"
	RolloutDone    = "done"
	RolloutFailed  = "failed"
)

// ErrRolloutRunning: a fleet update is running already.
var ErrRolloutRunning = errors.New("a fleet update is running")

// ErrFenced: the write carried an older fence than the job's; another
// edge runs the job now.
var ErrFenced = errors.New("another edge runs this job now")

// RolloutFailure is why a rollout stopped: the machine that failed.
type RolloutFailure struct {
	MachineID int64  `json:"machine_id"`
	Name      string `json:"name"`
	Reason    string `json:"error"`
}

// RolloutLine is one line of a rollout's log.
type RolloutLine struct {
	At    time.Time `json:"at"`
	Level string    `json:"level"`
	Text  string    `json:"text"`
}

// Rollout is a fleet update kept in the database: the machines it updates
// in order, how far it went, and which edge runs it under which fence.
// Started counts the machines handed to their agents (Updated and the
// failed one among them); the rest are untouched.
type Rollout struct {
	ID         int64
	Target     string
	BaseURL    string
	Batch      int
	MachineIDs []int64
	Updated    []int64
	Failed     *RolloutFailure
	Started    int
	Lines      []RolloutLine
	State      string
	Edge       string
	Fence      int64
	StartedAt  time.Time
	FinishedAt *time.Time
}

// MaxRolloutLines is how many of a rollout's last lines are kept.
const MaxRolloutLines = 200

// CreateRollout stores a new running rollout and returns its id; while
// another one runs it is refused with ErrRolloutRunning.
func (s *Store) CreateRollout(ctx context.Context, r Rollout) (int64, error) {
	ids, _ := json.Marshal(orEmpty(r.MachineIDs))
	var id int64
	err := s.Tx(ctx, func(tx *Tx) error {
		var n int
		if err := tx.queryRow(ctx, "SELECT COUNT(*) FROM rollouts WHERE state = ?", RolloutRunning).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return ErrRolloutRunning
		}
		var err error
		id, err = tx.insertID(ctx, `INSERT INTO rollouts(target, base_url, batch, machine_ids, state, started_at) VALUES (?, ?, ?, ?, ?, ?)`,
			r.Target, r.BaseURL, r.Batch, string(ids), RolloutRunning, r.StartedAt.UnixMilli())
		return err
	})
	return id, s.announce(err, TopicRollouts)
}

// ClaimRollout makes edge, holding fence, the runner of rollout id; an
// edge whose fence is older than the rollout's is refused with ErrFenced,
// and so is a rollout that is no longer running.
func (s *Store) ClaimRollout(ctx context.Context, id int64, edge string, fence int64) error {
	res, err := s.exec(ctx, "UPDATE rollouts SET edge = ?, fence = ? WHERE id = ? AND fence <= ? AND state = ?",
		edge, fence, id, fence, RolloutRunning)
	return s.fenced(res, err)
}

// SaveRollout writes how far r went (its progress, lines, state and end)
// under r.Fence: refused with ErrFenced when another edge claimed it since.
func (s *Store) SaveRollout(ctx context.Context, r Rollout) error {
	updated, _ := json.Marshal(orEmpty(r.Updated))
	lines := r.Lines
	if len(lines) > MaxRolloutLines {
		lines = lines[len(lines)-MaxRolloutLines:]
	}
	ls, _ := json.Marshal(orEmpty(lines))
	failed := ""
	if r.Failed != nil {
		b, _ := json.Marshal(r.Failed)
		failed = string(b)
	}
	var finished sql.NullInt64
	if r.FinishedAt != nil {
		finished = sql.NullInt64{Int64: r.FinishedAt.UnixMilli(), Valid: true}
	}
	res, err := s.exec(ctx, `UPDATE rollouts SET updated = ?, failed = ?, started = ?, lines = ?, state = ?, finished_at = ?
		WHERE id = ? AND fence = ? AND edge = ?`,
		string(updated), failed, r.Started, string(ls), r.State, finished, r.ID, r.Fence, r.Edge)
	return s.fenced(res, err)
}

// fenced is a fenced write's outcome: ErrFenced when it changed no row.
func (s *Store) fenced(res sql.Result, err error) error {
	err = affectOne(res, err)
	if errors.Is(err, ErrNotFound) {
		return ErrFenced
	}
	return s.announce(err, TopicRollouts)
}

// orEmpty writes a nil list as [], so that it reads back as an empty
// list, never null.
func orEmpty[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

// RunningRollout is the rollout that runs now, or ErrNotFound.
func (s *Store) RunningRollout(ctx context.Context) (Rollout, error) {
	return s.oneRollout(ctx, "WHERE state = ? ORDER BY id LIMIT 1", RolloutRunning)
}

// LastRollout is the latest rollout, or ErrNotFound before the first.
func (s *Store) LastRollout(ctx context.Context) (Rollout, error) {
	return s.oneRollout(ctx, "ORDER BY id DESC LIMIT 1")
}

func (s *Store) oneRollout(ctx context.Context, where string, args ...any) (Rollout, error) {
	var r Rollout
	var ids, updated, failed, lines string
	var started int64
	var finished sql.NullInt64
	err := s.queryRow(ctx, `SELECT id, target, base_url, batch, machine_ids, updated, failed, started, lines, state, edge, fence, started_at, finished_at
		FROM rollouts `+where, args...).Scan(&r.ID, &r.Target, &r.BaseURL, &r.Batch, &ids, &updated, &failed, &r.Started, &lines,
		&r.State, &r.Edge, &r.Fence, &started, &finished)
	if errors.Is(err, sql.ErrNoRows) {
		return r, ErrNotFound
	}
	if err != nil {
		return r, err
	}
	if err := errors.Join(json.Unmarshal([]byte(ids), &r.MachineIDs), json.Unmarshal([]byte(updated), &r.Updated),
		json.Unmarshal([]byte(lines), &r.Lines)); err != nil {
		return r, fmt.Errorf("rollout %d: %w", r.ID, err)
	}
	if failed != "" {
		r.Failed = &RolloutFailure{}
		if err := json.Unmarshal([]byte(failed), r.Failed); err != nil {
			return r, fmt.Errorf("rollout %d: %w", r.ID, err)
		}
	}
	r.StartedAt = time.UnixMilli(started).UTC()
	if finished.Valid {
		t := time.UnixMilli(finished.Int64).UTC()
		r.FinishedAt = &t
	}
	return r, nil
}
