package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// Passkey is a WebAuthn credential enrolled as a second-factor device.
type Passkey struct {
	ID           string
	Name         string
	CredentialID string // base64url
	Credential   string // go-webauthn's Credential, JSON
	CreatedAt    time.Time
	LastUsedAt   *time.Time
}

const passkeySelect = "SELECT id, name, credential_id, credential, created_at, last_used_at FROM passkeys"

func scanPasskey(r rowScanner) (Passkey, error) {
	var p Passkey
	var created int64
	var used sql.NullInt64
	err := r.Scan(&p.ID, &p.Name, &p.CredentialID, &p.Credential, &created, &used)
	if errors.Is(err, sql.ErrNoRows) {
		return p, ErrNotFound
	}
	p.CreatedAt = time.Unix(created, 0).UTC()
	if used.Valid {
		t := time.Unix(used.Int64, 0).UTC()
		p.LastUsedAt = &t
	}
	return p, err
}

// InsertPasskey enrolls p. When no second-factor device existed before,
// codeHashes become the backup codes and first is true (as
// ConfirmTOTPDevice).
func (s *Store) InsertPasskey(ctx context.Context, p Passkey, codeHashes []BackupCode) (first bool, err error) {
	err = s.Tx(ctx, func(tx *Tx) error {
		first, err = tx.enrollSecondFactor(ctx, codeHashes, p.CreatedAt, func() error {
			_, err := tx.exec(ctx, "INSERT INTO passkeys(id, name, credential_id, credential, created_at) VALUES (?, ?, ?, ?, ?)",
				p.ID, p.Name, p.CredentialID, p.Credential, p.CreatedAt.Unix())
			if isUniqueViolation(err) {
				return ErrConflict
			}
			return err
		})
		return err
	})
	return first, err
}

// ListPasskeys lists the passkeys, oldest first.
func (s *Store) ListPasskeys(ctx context.Context) ([]Passkey, error) {
	rows, err := s.query(ctx, passkeySelect+" ORDER BY created_at, id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Passkey{}
	for rows.Next() {
		p, err := scanPasskey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// UsePasskey records a use of passkey id and its credential as it is now
// (its sign count moves on with every use).
func (s *Store) UsePasskey(ctx context.Context, id, credential string, now time.Time) error {
	return affectOne(s.exec(ctx, "UPDATE passkeys SET credential = ?, last_used_at = ? WHERE id = ?", credential, now.Unix(), id))
}

// DeletePasskey removes one passkey; when it was the last second-factor
// device, 2FA is off (backup codes and pending logins go) and lastGone is
// true. ErrNotFound when absent.
func (s *Store) DeletePasskey(ctx context.Context, id string) (lastGone bool, err error) {
	return s.deleteSecondFactor(ctx, "DELETE FROM passkeys WHERE id = ?", id)
}

// deleteSecondFactor deletes one device of either kind (del, with id) and,
// when it was the last second-factor device, turns 2FA off (backup codes
// and pending logins go); lastGone says so. ErrNotFound when absent.
func (s *Store) deleteSecondFactor(ctx context.Context, del, id string) (lastGone bool, err error) {
	err = s.Tx(ctx, func(tx *Tx) error {
		res, err := tx.exec(ctx, del, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return ErrNotFound
		}
		var count int
		if err := tx.queryRow(ctx, secondFactorCount).Scan(&count); err != nil {
			return err
		}
		if count > 0 {
			return nil
		}
		lastGone = true
		return clear2FA(ctx, tx)
	})
	return lastGone, err
}

// PutCeremony keeps a WebAuthn ceremony's session data until expires.
// Expired ones are dropped on the way.
func (s *Store) PutCeremony(ctx context.Context, id, kind, session string, expires, now time.Time) error {
	return s.Tx(ctx, func(tx *Tx) error {
		if _, err := tx.exec(ctx, "DELETE FROM webauthn_ceremonies WHERE expires_at <= ?", now.Unix()); err != nil {
			return err
		}
		_, err := tx.exec(ctx, "INSERT INTO webauthn_ceremonies(id, kind, session, expires_at) VALUES (?, ?, ?, ?)", id, kind, session, expires.Unix())
		return err
	})
}

// TakeCeremony returns and ends the ceremony id of kind; ErrNotFound when
// there is none, it is of another kind, or it expired. A ceremony is
// answered once.
func (s *Store) TakeCeremony(ctx context.Context, id, kind string, now time.Time) (string, error) {
	var session string
	err := s.Tx(ctx, func(tx *Tx) error {
		var k string
		var expires int64
		err := tx.queryRow(ctx, "SELECT kind, session, expires_at FROM webauthn_ceremonies WHERE id = ?", id).Scan(&k, &session, &expires)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "DELETE FROM webauthn_ceremonies WHERE id = ?", id); err != nil {
			return err
		}
		if k != kind || expires <= now.Unix() {
			return ErrNotFound
		}
		return nil
	})
	return session, err
}

// LoginPendingFrom returns the address the live pending login tokenHash
// was started from, and whether there is one.
func (s *Store) LoginPendingFrom(ctx context.Context, tokenHash string, now time.Time) (string, bool, error) {
	var from string
	err := s.queryRow(ctx, "SELECT client_addr FROM login_pending WHERE token_hash = ? AND expires_at > ?", tokenHash, now.Unix()).Scan(&from)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return from, err == nil, err
}
