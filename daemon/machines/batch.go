package machines

import (
	"context"
	"errors"
	"fmt"

	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// TunnelOp is one tunnel change of a batch: ID 0 creates a tunnel from
// In, Delete removes tunnel ID, and otherwise In changes tunnel ID.
type TunnelOp struct {
	ID     int64
	Delete bool
	In     TunnelInput
}

// OpError is the change of a batch that was refused, by its index (a
// setting's index follows the tunnels').
type OpError struct {
	Index int
	Err   error
}

func (e *OpError) Error() string { return fmt.Sprintf("change %d: %v", e.Index, e.Err) }
func (e *OpError) Unwrap() error { return e.Err }

// ApplyTunnels checks every op, then stores them and the settings in one
// transaction: all or none. With dryRun the database checks them too
// (names, subdomains, ports) and nothing is kept. It returns each op's
// tunnel ID (a created one's new ID).
func (s *Service) ApplyTunnels(ctx context.Context, ops []TunnelOp, settings []store.SettingWrite, dryRun bool) ([]int64, error) {
	ws := make([]tunnelWrite, len(ops))
	for i, op := range ops {
		var err error
		switch {
		case op.Delete:
			ws[i], err = s.planDelete(ctx, op.ID)
		case op.ID == 0:
			ws[i], err = s.planCreate(ctx, op.In)
		default:
			ws[i], err = s.planUpdate(ctx, op.ID, op.In)
		}
		if err != nil {
			return nil, &OpError{Index: i, Err: err}
		}
	}
	batch := make([]store.TunnelWrite, len(ws))
	for i, w := range ws {
		batch[i] = w.TunnelWrite
	}
	created, err := s.Store.WriteTunnels(ctx, batch, settings, s.Ports, s.now(), dryRun)
	var we *store.WriteError
	if errors.As(err, &we) {
		e := we.Err
		if we.Index < len(ws) {
			e = writeError(we.Err, ws[we.Index].Tunnel)
		}
		return nil, &OpError{Index: we.Index, Err: e}
	}
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(ws))
	for i, w := range ws {
		ids[i] = w.Tunnel.ID
		var c store.Tunnel
		if w.Kind == store.WriteCreate {
			c, created = created[0], created[1:]
			ids[i] = c.ID
		}
		if !dryRun {
			s.told(ctx, w, c)
		}
	}
	return ids, nil
}
