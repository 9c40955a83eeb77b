// Package edges is the cluster's list of VPSes (edges) that share one
// PostgreSQL database: their status as the dashboard shows it, the
// one-time tokens a new edge joins with, what a joining edge is handed
// (the database URL and the sealing key), and retiring an edge.
package edges

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tunnelsvc/tunnelsvc/daemon/config"
	"github.com/tunnelsvc/tunnelsvc/daemon/seal"
	"github.com/tunnelsvc/tunnelsvc/daemon/store"
)

// TokenTTL is how long an edge join token is valid.
const TokenTTL = time.Hour

// Errors a caller maps to what the client sees.
var (
	// ErrNotShared: this install keeps its state in SQLite, which another
	// VPS cannot share.
	ErrNotShared = errors.New("this edge keeps its state in SQLite, which no other edge can share: move it to PostgreSQL first (docs/database.md), then add edges")
	// ErrSelf: an edge cannot retire itself.
	ErrSelf = errors.New("an edge cannot retire itself: retire it from another edge of the cluster")
	// ErrLast: the last edge of a cluster cannot be retired.
	ErrLast = errors.New("this is the cluster's only edge")
)

// InputError is a bad value the client sent.
type InputError struct{ Msg string }

func (e InputError) Error() string { return e.Msg }

// Service answers for the edges of this daemon's cluster.
type Service struct {
	Store *store.Store
	// Self returns this daemon's edge id (0 while unknown) and name.
	Self func() (int64, string)
	// DatabaseURL is the URL this daemon opened ("" for SQLite): what a
	// joining edge is handed, so the URL must work from other VPSes.
	DatabaseURL string
	// DataDir holds the sealing key (seal.KeyFile).
	DataDir string
	Now     func() time.Time
}

func (s *Service) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

// View is an edge as GET /api/edges lists it.
type View struct {
	ID       int64      `json:"id"`
	Name     string     `json:"name"`
	Address  string     `json:"address"`
	Status   string     `json:"status"` // up, down, joining, retiring
	LastSeen *time.Time `json:"last_seen"`
	Version  string     `json:"version"`
	// TunnelVersion is the version its tunnel server last answered with.
	TunnelVersion string `json:"tunnel_version"`
	// This is the edge that answered.
	This bool `json:"this"`
	// Parts are what the edge last found of the parts of its own host
	// (hostsync): each applied as desired, or pending since when and why.
	Parts []Part `json:"parts"`
}

// List returns every edge, oldest first.
func (s *Service) List(ctx context.Context) ([]View, error) {
	list, err := s.Store.ListEdges(ctx)
	if err != nil {
		return nil, err
	}
	parts, err := s.Store.HostParts(ctx)
	if err != nil {
		return nil, err
	}
	byEdge := map[string][]Part{}
	for _, p := range parts {
		byEdge[p.Edge] = append(byEdge[p.Edge], partView(p))
	}
	self, _ := s.Self()
	now := s.now()
	out := make([]View, 0, len(list))
	for _, e := range list {
		v := View{ID: e.ID, Name: e.Name, Address: e.Address, Version: e.Version, TunnelVersion: e.TunnelVersion, This: e.ID == self, Parts: byEdge[e.Name]}
		if v.Parts == nil {
			v.Parts = []Part{}
		}
		switch {
		case e.RetiringAt != nil:
			v.Status = "retiring"
		case e.LastSeen.IsZero():
			v.Status = "joining"
		case e.Up(now):
			v.Status = "up"
		default:
			v.Status = "down"
		}
		if !e.LastSeen.IsZero() {
			t := e.LastSeen
			v.LastSeen = &t
		}
		out = append(out, v)
	}
	return out, nil
}

// Part is one part of an edge's own host, as the Edges page shows it.
type Part struct {
	Part         string     `json:"part"`
	Label        string     `json:"label"`
	InUse        bool       `json:"in_use"`
	Generation   int64      `json:"generation"`
	Drifted      bool       `json:"drifted"`
	PendingSince *time.Time `json:"pending_since"`
	Error        string     `json:"error"`
	CheckedAt    time.Time  `json:"checked_at"`
}

func partView(p store.HostPart) Part {
	return Part{Part: p.Part, Label: p.Label, InUse: p.InUse, Generation: p.Generation, Drifted: p.Drifted(),
		PendingSince: p.PendingSince, Error: p.Error, CheckedAt: p.CheckedAt}
}

// Token is a new edge join token; the secret is shown once.
type Token struct {
	ID        int64     `json:"id"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// CreateToken makes a one-time join token valid for TokenTTL. It is
// refused on SQLite: nothing could join it.
func (s *Service) CreateToken(ctx context.Context) (Token, error) {
	if s.DatabaseURL == "" || s.Store.Engine() != "postgres" {
		return Token{}, ErrNotShared
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return Token{}, err
	}
	tok := "edge_" + base64.RawURLEncoding.EncodeToString(b)
	now := s.now()
	id, err := s.Store.InsertEdgeToken(ctx, hashToken(tok), now, now.Add(TokenTTL))
	if err != nil {
		return Token{}, err
	}
	return Token{ID: id, Token: tok, ExpiresAt: now.Add(TokenTTL).UTC()}, nil
}

func hashToken(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

// Grant is what a joining edge is handed: everything it needs to serve
// the same cluster. Both are secrets; the answer goes only over TLS.
type Grant struct {
	Name        string `json:"name"`
	DatabaseURL string `json:"database_url"`
	// SealingKey is the key sealed secrets open with, base64.
	SealingKey string `json:"sealing_key"`
	// Edges are the cluster's edges before this one joined.
	Edges []string `json:"edges"`
}

// Join claims a token for the edge named name and hands over the grant.
// The same edge may join again with its token (a join run twice);
// ErrTokenInvalid otherwise.
func (s *Service) Join(ctx context.Context, token, name string) (Grant, error) {
	if err := config.CheckEdgeName(name); err != nil {
		return Grant{}, InputError{err.Error()}
	}
	if s.DatabaseURL == "" || s.Store.Engine() != "postgres" {
		return Grant{}, ErrNotShared
	}
	list, err := s.Store.ListEdges(ctx)
	if err != nil {
		return Grant{}, err
	}
	if err := s.Store.ClaimEdgeToken(ctx, hashToken(token), name, s.now()); err != nil {
		return Grant{}, err
	}
	key, err := os.ReadFile(filepath.Join(s.DataDir, seal.KeyFile))
	if err != nil {
		return Grant{}, fmt.Errorf("reading the sealing key: %w", err)
	}
	if err := s.Store.RegisterEdge(ctx, name, s.now()); err != nil {
		return Grant{}, err
	}
	g := Grant{Name: name, DatabaseURL: s.DatabaseURL, SealingKey: base64.StdEncoding.EncodeToString(key), Edges: []string{}}
	for _, e := range list {
		if e.Name != name {
			g.Edges = append(g.Edges, e.Name)
		}
	}
	return g, nil
}

// Retire starts retiring an edge: machines drop it from their set, and
// the row is forgotten once none is connected through it (Forget). The
// edge that answers cannot retire itself.
func (s *Service) Retire(ctx context.Context, id int64) (store.Edge, error) {
	e, err := s.Store.GetEdge(ctx, id)
	if err != nil {
		return e, err
	}
	if self, _ := s.Self(); self == id {
		return e, ErrSelf
	}
	list, err := s.Store.ListEdges(ctx)
	if err != nil {
		return e, err
	}
	if len(list) < 2 {
		return e, ErrLast
	}
	return e, s.Store.RetireEdge(ctx, id, s.now())
}

// ForgetRetired deletes the edges being retired that no machine is
// connected through any more (or that are down), and returns their names.
func (s *Service) ForgetRetired(ctx context.Context) ([]string, error) {
	list, err := s.Store.ListEdges(ctx)
	if err != nil {
		return nil, err
	}
	conns, err := s.Store.MachineEdges(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	var gone []string
	for _, e := range list {
		if e.RetiringAt == nil {
			continue
		}
		busy := false
		for _, cs := range conns {
			for _, c := range cs {
				if c.EdgeID == e.ID && c.Status == "online" && e.Up(now) {
					busy = true
				}
			}
		}
		if busy {
			continue
		}
		if err := s.Store.ForgetEdge(ctx, e.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return gone, err
		}
		gone = append(gone, e.Name)
	}
	return gone, nil
}
