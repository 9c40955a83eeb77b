package machines

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

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
	freed := freedBy(ops)
	for i, op := range ops {
		var err error
		switch {
		case op.Delete:
			ws[i], err = s.planDelete(ctx, op.ID)
		case op.ID == 0:
			ws[i], err = s.planCreate(ctx, op.In, freed)
		default:
			ws[i], err = s.planUpdate(ctx, op.ID, op.In, freed)
		}
		if err != nil {
			return nil, &OpError{Index: i, Err: err}
		}
	}
	// Removals first, then changes, then new tunnels: a site moved to
	// another machine (removed here, made there) frees its subdomain and
	// port before the new one takes them.
	order := make([]int, len(ws))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(writeRank[ws[a].Kind], writeRank[ws[b].Kind]) })
	batch := make([]store.TunnelWrite, len(ws))
	for k, i := range order {
		batch[k] = ws[i].TunnelWrite
	}
	created, err := s.Store.WriteTunnels(ctx, batch, settings, s.Ports, s.now(), dryRun)
	var we *store.WriteError
	if errors.As(err, &we) {
		if we.Index >= len(ws) {
			return nil, &OpError{Index: we.Index, Err: we.Err}
		}
		i := order[we.Index]
		return nil, &OpError{Index: i, Err: writeError(we.Err, ws[i].Tunnel)}
	}
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(ws))
	for _, i := range order {
		w := ws[i]
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

// writeRank orders a batch's writes: removals, changes, creations.
var writeRank = map[store.WriteKind]int{store.WriteDelete: 0, store.WriteUpdate: 1, store.WriteCreate: 2}

// freedBy says which domains ops give up: every domain of a tunnel they
// remove, and those a change leaves out of its tunnel's list. (The batch
// runs removals first; a change that takes a domain another change gives
// up must come after it in the file.)
func freedBy(ops []TunnelOp) func(owner int64, domain string) bool {
	removed := map[int64]bool{}
	kept := map[int64][]string{}
	for _, op := range ops {
		switch {
		case op.Delete:
			removed[op.ID] = true
		case op.ID != 0 && op.In.Domains != nil:
			kept[op.ID] = *op.In.Domains
		}
	}
	return func(owner int64, domain string) bool {
		if removed[owner] {
			return true
		}
		list, changed := kept[owner]
		return changed && !slices.ContainsFunc(list, func(d string) bool {
			return strings.EqualFold(strings.TrimSuffix(strings.TrimSpace(d), "."), domain)
		})
	}
}
