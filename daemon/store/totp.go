package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// TOTPDevice is an enrolled authenticator. SecretSealed stays sealed here;
// the totp package opens it.
type TOTPDevice struct {
	ID           string
	Name         string
	SecretSealed string
	CreatedAt    time.Time
	LastUsedAt   *time.Time
	LastStep     int64
}

// TOTPEnrollment is the enrollment waiting for its confirm code.
type TOTPEnrollment struct {
	DeviceID     string
	SecretSealed string
	ExpiresAt    time.Time
}

// BackupCode is one unused backup code's hash. Lookup is its non-secret
// prefix; empty for codes issued before prefixes existed.
type BackupCode struct {
	ID       int64
	CodeHash string
	Lookup   string
}

// ListTOTPDevices returns every device, oldest first.
func (s *Store) ListTOTPDevices(ctx context.Context) ([]TOTPDevice, error) {
	rows, err := s.query(ctx,
		"SELECT id, name, secret_sealed, created_at, last_used_at, last_step FROM totp_devices ORDER BY created_at, id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []TOTPDevice{}
	for rows.Next() {
		var d TOTPDevice
		var created int64
		var used sql.NullInt64
		if err := rows.Scan(&d.ID, &d.Name, &d.SecretSealed, &created, &used, &d.LastStep); err != nil {
			return nil, err
		}
		d.CreatedAt = time.Unix(created, 0).UTC()
		if used.Valid {
			t := time.Unix(used.Int64, 0).UTC()
			d.LastUsedAt = &t
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// CountTOTPDevices returns how many devices are enrolled.
func (s *Store) CountTOTPDevices(ctx context.Context) (int, error) {
	var n int
	err := s.queryRow(ctx, "SELECT COUNT(*) FROM totp_devices").Scan(&n)
	return n, err
}

// secondFactorCount counts the second-factor devices: TOTP and passkeys.
const secondFactorCount = "SELECT (SELECT COUNT(*) FROM totp_devices) + (SELECT COUNT(*) FROM passkeys)"

// CountSecondFactors counts the second-factor devices of both kinds: 2FA
// is on while there is one.
func (s *Store) CountSecondFactors(ctx context.Context) (int, error) {
	var n int
	err := s.queryRow(ctx, secondFactorCount).Scan(&n)
	return n, err
}

// UseTOTPStep records that device id accepted the code of time step step,
// only if no code of that step or a later one was accepted before. It
// reports whether it did: false means a replay (or a removed device).
func (s *Store) UseTOTPStep(ctx context.Context, id string, step int64, now time.Time) (bool, error) {
	res, err := s.exec(ctx,
		"UPDATE totp_devices SET last_step = ?, last_used_at = ? WHERE id = ? AND last_step < ?",
		step, now.Unix(), id, step)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// PutTOTPEnrollment stores the pending enrollment, replacing any earlier one.
func (s *Store) PutTOTPEnrollment(ctx context.Context, e TOTPEnrollment) error {
	_, err := s.exec(ctx,
		`INSERT INTO totp_enrollment(slot, device_id, secret_sealed, expires_at) VALUES (1, ?, ?, ?)
		 ON CONFLICT(slot) DO UPDATE SET device_id = excluded.device_id,
		   secret_sealed = excluded.secret_sealed, expires_at = excluded.expires_at`,
		e.DeviceID, e.SecretSealed, e.ExpiresAt.Unix())
	return err
}

// GetTOTPEnrollment returns the pending enrollment, or ErrNotFound.
func (s *Store) GetTOTPEnrollment(ctx context.Context) (TOTPEnrollment, error) {
	var e TOTPEnrollment
	var exp int64
	err := s.queryRow(ctx, "SELECT device_id, secret_sealed, expires_at FROM totp_enrollment WHERE slot = 1").
		Scan(&e.DeviceID, &e.SecretSealed, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return e, ErrNotFound
	}
	e.ExpiresAt = time.Unix(exp, 0)
	return e, err
}

// ConfirmTOTPDevice commits the pending enrollment of d.ID as device d in
// one transaction. When no device existed before, codes become the
// backup codes (replacing any) and first is true; otherwise codeHashes are
// ignored. ErrNotFound means the enrollment was replaced or confirmed
// meanwhile.
func (s *Store) ConfirmTOTPDevice(ctx context.Context, d TOTPDevice, codeHashes []BackupCode) (first bool, err error) {
	err = s.Tx(ctx, func(tx *Tx) error {
		res, err := tx.exec(ctx, "DELETE FROM totp_enrollment WHERE slot = 1 AND device_id = ?", d.ID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return ErrNotFound
		}
		var used any
		if d.LastUsedAt != nil {
			used = d.LastUsedAt.Unix()
		}
		first, err = tx.enrollSecondFactor(ctx, codeHashes, d.CreatedAt, func() error {
			_, err := tx.exec(ctx,
				"INSERT INTO totp_devices(id, name, secret_sealed, created_at, last_used_at, last_step) VALUES (?, ?, ?, ?, ?, ?)",
				d.ID, d.Name, d.SecretSealed, d.CreatedAt.Unix(), used, d.LastStep)
			return err
		})
		return err
	})
	return first, err
}

// enrollSecondFactor runs insert, which adds a second-factor device of
// either kind; when none existed before, codeHashes become the backup
// codes (replacing any) and first is true.
func (t *Tx) enrollSecondFactor(ctx context.Context, codeHashes []BackupCode, at time.Time, insert func() error) (first bool, err error) {
	var count int
	if err := t.queryRow(ctx, secondFactorCount).Scan(&count); err != nil {
		return false, err
	}
	if err := insert(); err != nil {
		return false, err
	}
	if count > 0 {
		return false, nil
	}
	return true, replaceBackupCodes(ctx, t, codeHashes, at)
}

// DeleteTOTPDevice removes one device. When it was the last one, 2FA is off:
// the backup codes go too, and lastGone is true. ErrNotFound when absent.
func (s *Store) DeleteTOTPDevice(ctx context.Context, id string) (lastGone bool, err error) {
	return s.deleteSecondFactor(ctx, "DELETE FROM totp_devices WHERE id = ?", id)
}

// DisableTOTP removes every device, backup code, pending enrollment and
// pending login, and reports how many devices there were.
func (s *Store) DisableTOTP(ctx context.Context) (devices int, err error) {
	err = s.Tx(ctx, func(tx *Tx) error {
		if err := tx.queryRow(ctx, secondFactorCount).Scan(&devices); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "DELETE FROM totp_devices"); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "DELETE FROM passkeys"); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "DELETE FROM totp_enrollment"); err != nil {
			return err
		}
		return clear2FA(ctx, tx)
	})
	return devices, err
}

func clear2FA(ctx context.Context, tx *Tx) error {
	if _, err := tx.exec(ctx, "DELETE FROM backup_codes"); err != nil {
		return err
	}
	_, err := tx.exec(ctx, "DELETE FROM login_pending")
	return err
}

// ReplaceBackupCodes makes codes the only backup codes.
func (s *Store) ReplaceBackupCodes(ctx context.Context, codeHashes []BackupCode, now time.Time) error {
	return s.Tx(ctx, func(tx *Tx) error { return replaceBackupCodes(ctx, tx, codeHashes, now) })
}

func replaceBackupCodes(ctx context.Context, tx *Tx, codes []BackupCode, now time.Time) error {
	if _, err := tx.exec(ctx, "DELETE FROM backup_codes"); err != nil {
		return err
	}
	for _, c := range codes {
		if _, err := tx.exec(ctx, "INSERT INTO backup_codes(code_hash, lookup, created_at) VALUES (?, NULLIF(?, ''), ?)",
			c.CodeHash, c.Lookup, now.Unix()); err != nil {
			return err
		}
	}
	return nil
}

// BackupCodesByLookup returns the unused backup codes with prefix lookup;
// an empty lookup returns the codes issued without one.
func (s *Store) BackupCodesByLookup(ctx context.Context, lookup string) ([]BackupCode, error) {
	rows, err := s.query(ctx,
		"SELECT id, code_hash, COALESCE(lookup, '') FROM backup_codes WHERE COALESCE(lookup, '') = ? ORDER BY id", lookup)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []BackupCode
	for rows.Next() {
		var c BackupCode
		if err := rows.Scan(&c.ID, &c.CodeHash, &c.Lookup); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// CountBackupCodes returns how many backup codes are left.
func (s *Store) CountBackupCodes(ctx context.Context) (int, error) {
	var n int
	err := s.queryRow(ctx, "SELECT COUNT(*) FROM backup_codes").Scan(&n)
	return n, err
}

// UseBackupCode deletes backup code id and reports whether it was still
// there, so two requests racing with one code cannot both win.
func (s *Store) UseBackupCode(ctx context.Context, id int64) (bool, error) {
	res, err := s.exec(ctx, "DELETE FROM backup_codes WHERE id = ?", id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// CreateLoginPending stores a pending login, dropping expired ones.
func (s *Store) CreateLoginPending(ctx context.Context, tokenHash, clientAddr string, now, expires time.Time) error {
	if _, err := s.exec(ctx, "DELETE FROM login_pending WHERE expires_at <= ?", now.Unix()); err != nil {
		return err
	}
	_, err := s.exec(ctx,
		"INSERT INTO login_pending(token_hash, expires_at, client_addr) VALUES (?, ?, ?)", tokenHash, expires.Unix(), clientAddr)
	return err
}

// ReserveLoginPendingAttempt takes one code attempt of the live pending
// login tokenHash, if it has had fewer than max. It returns the address the
// login was started from; ok false means no such live login or no attempt
// left.
func (s *Store) ReserveLoginPendingAttempt(ctx context.Context, tokenHash string, now time.Time, max int) (clientAddr string, ok bool, err error) {
	err = s.writeReturning(ctx,
		`UPDATE login_pending SET attempts = attempts + 1
		 WHERE token_hash = ? AND expires_at > ? AND attempts < ? RETURNING client_addr`,
		[]any{tokenHash, now.Unix(), max}, &clientAddr)
	s.noteWrite(err)
	if err == nil {
		s.wrote(ctx)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return clientAddr, err == nil, err
}

// ReleaseLoginPendingAttempt gives back an attempt that never ran.
func (s *Store) ReleaseLoginPendingAttempt(ctx context.Context, tokenHash string) error {
	_, err := s.exec(ctx, "UPDATE login_pending SET attempts = attempts - 1 WHERE token_hash = ? AND attempts > 0", tokenHash)
	return err
}

// DeleteSpentLoginPending removes the pending login tokenHash if it has
// used max attempts.
func (s *Store) DeleteSpentLoginPending(ctx context.Context, tokenHash string, max int) error {
	_, err := s.exec(ctx, "DELETE FROM login_pending WHERE token_hash = ? AND attempts >= ?", tokenHash, max)
	return err
}

// ConsumeLoginPending deletes a live pending login and reports whether it
// was there: a token completes one login only.
func (s *Store) ConsumeLoginPending(ctx context.Context, tokenHash string, now time.Time) (bool, error) {
	res, err := s.exec(ctx, "DELETE FROM login_pending WHERE token_hash = ? AND expires_at > ?", tokenHash, now.Unix())
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}
