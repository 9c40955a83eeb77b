package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// SSHKey is a stored key pair; PrivateSealed stays sealed here.
type SSHKey struct {
	ID            string
	Name          string
	Type          string
	PublicKey     string
	Fingerprint   string
	PrivateSealed string
	IsDefault     bool
	CreatedAt     time.Time
	MachineCount  int
}

// ErrDefaultKey is DeleteSSHKey's refusal to delete the default key while
// other keys exist.
var ErrDefaultKey = errors.New("the default key cannot be deleted while other keys exist")

const sshKeyColumns = `k.id, k.name, k.key_type, k.public_key, k.fingerprint, k.private_sealed, k.is_default, k.created_at,
	COALESCE(u.machine_count, 0)`

const sshKeyFrom = ` FROM ssh_keys k LEFT JOIN ssh_key_machine_counts u ON u.ssh_key_id = k.id`

func scanSSHKey(sc interface{ Scan(...any) error }) (SSHKey, error) {
	var k SSHKey
	var created int64
	err := sc.Scan(&k.ID, &k.Name, &k.Type, &k.PublicKey, &k.Fingerprint, &k.PrivateSealed, &k.IsDefault, &created, &k.MachineCount)
	k.CreatedAt = time.Unix(created, 0).UTC()
	return k, err
}

// ListSSHKeys returns every key, oldest first, with its machine count.
func (s *Store) ListSSHKeys(ctx context.Context) ([]SSHKey, error) {
	rows, err := s.query(ctx, "SELECT "+sshKeyColumns+sshKeyFrom+" ORDER BY k.created_at, k.id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []SSHKey{}
	for rows.Next() {
		k, err := scanSSHKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// GetSSHKey returns key id, or ErrNotFound.
func (s *Store) GetSSHKey(ctx context.Context, id string) (SSHKey, error) {
	k, err := scanSSHKey(s.queryRow(ctx, "SELECT "+sshKeyColumns+sshKeyFrom+" WHERE k.id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return SSHKey{}, ErrNotFound
	}
	return k, err
}

// DefaultSSHKey returns the default key, or ErrNotFound when there is none.
func (s *Store) DefaultSSHKey(ctx context.Context) (SSHKey, error) {
	k, err := scanSSHKey(s.queryRow(ctx, "SELECT "+sshKeyColumns+sshKeyFrom+" WHERE k.is_default = 1"))
	if errors.Is(err, sql.ErrNoRows) {
		return SSHKey{}, ErrNotFound
	}
	return k, err
}

// InsertSSHKey stores k. It becomes the default when makeDefault is set or
// when no default exists (the first key); the result says which.
func (s *Store) InsertSSHKey(ctx context.Context, k SSHKey, makeDefault bool) (isDefault bool, err error) {
	err = s.Tx(ctx, func(tx *Tx) error {
		var defaults int
		if err := tx.queryRow(ctx, "SELECT COUNT(*) FROM ssh_keys WHERE is_default = 1").Scan(&defaults); err != nil {
			return err
		}
		isDefault = makeDefault || defaults == 0
		if isDefault {
			if _, err := tx.exec(ctx, "UPDATE ssh_keys SET is_default = 0 WHERE is_default = 1"); err != nil {
				return err
			}
		}
		_, err := tx.exec(ctx,
			`INSERT INTO ssh_keys(id, name, key_type, public_key, fingerprint, private_sealed, is_default, created_at)
			 VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			k.ID, k.Name, k.Type, k.PublicKey, k.Fingerprint, k.PrivateSealed, isDefault, k.CreatedAt.Unix())
		return err
	})
	return isDefault, err
}

// SetDefaultSSHKey makes key id the only default; ErrNotFound when absent.
func (s *Store) SetDefaultSSHKey(ctx context.Context, id string) error {
	return s.Tx(ctx, func(tx *Tx) error {
		var n int
		if err := tx.queryRow(ctx, "SELECT COUNT(*) FROM ssh_keys WHERE id = ?", id).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return ErrNotFound
		}
		if _, err := tx.exec(ctx, "UPDATE ssh_keys SET is_default = 0 WHERE is_default = 1 AND id <> ?", id); err != nil {
			return err
		}
		_, err := tx.exec(ctx, "UPDATE ssh_keys SET is_default = 1 WHERE id = ?", id)
		return err
	})
}

// DeleteSSHKey deletes key id: ErrNotFound when absent, ErrDefaultKey when
// it is the default and other keys exist (deleting the only key is fine).
func (s *Store) DeleteSSHKey(ctx context.Context, id string) error {
	return s.Tx(ctx, func(tx *Tx) error {
		var isDefault bool
		err := tx.queryRow(ctx, "SELECT is_default FROM ssh_keys WHERE id = ?", id).Scan(&isDefault)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if isDefault {
			var n int
			if err := tx.queryRow(ctx, "SELECT COUNT(*) FROM ssh_keys").Scan(&n); err != nil {
				return err
			}
			if n > 1 {
				return ErrDefaultKey
			}
		}
		_, err = tx.exec(ctx, "DELETE FROM ssh_keys WHERE id = ?", id)
		return err
	})
}
