package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// WriteKind is what a TunnelWrite does.
type WriteKind int

// The kinds of TunnelWrite.
const (
	WriteCreate WriteKind = iota
	WriteUpdate
	WriteDelete
)

// TunnelWrite is one tunnel's write in a batch: the tunnel (its ID for an
// update or a delete) and, when not nil, its gate, domains and targets.
type TunnelWrite struct {
	Kind    WriteKind
	Tunnel  Tunnel
	Access  *TunnelAccess
	Domains *[]string
	Targets *[]TargetSpec
}

// SettingWrite is one setting set in a batch ("" removes it).
type SettingWrite struct {
	Key, Value string
}

// WriteError is the write of a batch that failed, by its index.
type WriteError struct {
	Index int
	Err   error
}

func (e *WriteError) Error() string { return fmt.Sprintf("write %d: %v", e.Index, e.Err) }
func (e *WriteError) Unwrap() error { return e.Err }

// errDryRun rolls a dry run's transaction back once every write passed.
var errDryRun = errors.New("dry run")

// WriteTunnels makes every write, then every setting, in one transaction:
// all or none, and other edges hear of them together. The tunnels created
// come back in order. With dryRun every write is made and checked by the
// database, then rolled back. A write that fails is a *WriteError (a
// setting's index follows the tunnels').
func (s *Store) WriteTunnels(ctx context.Context, ws []TunnelWrite, settings []SettingWrite, r PortRange, now time.Time, dryRun bool) ([]Tunnel, error) {
	var created []Tunnel
	err := s.Tx(ctx, func(tx *Tx) error {
		created = created[:0]
		for i, w := range ws {
			var err error
			switch w.Kind {
			case WriteCreate:
				var t Tunnel
				if t, err = insertTunnelParts(ctx, tx, w, r, now); err == nil {
					created = append(created, t)
				}
			case WriteUpdate:
				err = updateTunnelParts(ctx, tx, w, r)
			case WriteDelete:
				err = deleteTunnel(ctx, tx, w.Tunnel.ID)
			}
			if err != nil {
				return &WriteError{Index: i, Err: err}
			}
		}
		for i, set := range settings {
			if err := setSetting(ctx, tx, set.Key, set.Value); err != nil {
				return &WriteError{Index: len(ws) + i, Err: err}
			}
		}
		if dryRun {
			return errDryRun
		}
		return nil
	})
	if dryRun && errors.Is(err, errDryRun) {
		return created, nil
	}
	topics := []string{TopicTunnels}
	if len(settings) > 0 {
		topics = append(topics, TopicSettings)
	}
	return created, s.announce(err, topics...)
}
