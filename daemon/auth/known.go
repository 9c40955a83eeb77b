package auth

import (
	"context"
	"net/netip"
	"sync"
	"time"
)

// Known clients: the addresses (LimitKey) that completed a login or the
// setup. During a flood of logins from elsewhere their checks go ahead of
// the queue, so the operator still gets in.
const (
	maxKnown    = 64
	KnownMemory = 30 * 24 * time.Hour
)

// KnownClients is a small set of client keys, newest kept; the zero value
// is empty and ready.
type KnownClients struct {
	mu   sync.Mutex
	seen map[netip.Prefix]time.Time
}

// Has reports whether k logged in before.
func (k *KnownClients) Has(p netip.Prefix) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.seen[p]
	return ok
}

// Add remembers p, dropping the least recent when full.
func (k *KnownClients) Add(p netip.Prefix) {
	if !p.IsValid() {
		return
	}
	k.addAt(p, time.Now())
}

func (k *KnownClients) addAt(p netip.Prefix, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.seen == nil {
		k.seen = map[netip.Prefix]time.Time{}
	}
	if _, ok := k.seen[p]; !ok && len(k.seen) >= maxKnown {
		var oldest netip.Prefix
		var t time.Time
		for q, at := range k.seen {
			if t.IsZero() || at.Before(t) {
				oldest, t = q, at
			}
		}
		delete(k.seen, oldest)
	}
	k.seen[p] = at
}

// LoadKnown seeds s.Known from the audit log: the addresses of successful
// logins and the setup within KnownMemory, so a restart keeps them.
func (s *Service) LoadKnown(ctx context.Context, kinds ...string) error {
	addrs, err := s.Store.RecentAuditAddrs(ctx, s.Now().Add(-KnownMemory), maxKnown, kinds...)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a.Addr); err == nil {
			s.Known.addAt(LimitKey(ip), a.At)
		}
	}
	return nil
}
