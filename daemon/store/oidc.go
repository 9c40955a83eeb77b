package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// OIDCFlow is a sign-in through the OpenID provider under way.
type OIDCFlow struct {
	StateHash, Nonce, Verifier, Purpose, ReturnTo string
	ExpiresAt                                     time.Time
}

// PutOIDCFlow keeps f until it expires; expired flows are dropped on the way.
func (s *Store) PutOIDCFlow(ctx context.Context, f OIDCFlow, now time.Time) error {
	return s.Tx(ctx, func(tx *Tx) error {
		if _, err := tx.exec(ctx, "DELETE FROM oidc_flows WHERE expires_at <= ?", now.Unix()); err != nil {
			return err
		}
		_, err := tx.exec(ctx, "INSERT INTO oidc_flows(state_hash, nonce, verifier, purpose, return_to, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
			f.StateHash, f.Nonce, f.Verifier, f.Purpose, f.ReturnTo, f.ExpiresAt.Unix())
		return err
	})
}

// TakeOIDCFlow returns and ends the live flow of stateHash; ErrNotFound
// when there is none (unknown, expired, or already taken).
func (s *Store) TakeOIDCFlow(ctx context.Context, stateHash string, now time.Time) (OIDCFlow, error) {
	var f OIDCFlow
	err := s.Tx(ctx, func(tx *Tx) error {
		var expires int64
		err := tx.queryRow(ctx, "SELECT state_hash, nonce, verifier, purpose, return_to, expires_at FROM oidc_flows WHERE state_hash = ?", stateHash).
			Scan(&f.StateHash, &f.Nonce, &f.Verifier, &f.Purpose, &f.ReturnTo, &expires)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		f.ExpiresAt = time.Unix(expires, 0).UTC()
		_, err = tx.exec(ctx, "DELETE FROM oidc_flows WHERE state_hash = ?", stateHash)
		return err
	})
	if err == nil && !now.Before(f.ExpiresAt) {
		return OIDCFlow{}, ErrNotFound
	}
	return f, err
}
