-- Two-factor authentication (spec §3 rows 2FA, 2FA device, Backup codes).

-- Enrolled TOTP devices. secret_sealed is the base32 secret sealed with the
-- key file (aad "totp:<id>"), so a copy of the database alone reveals no
-- secret. last_step is the replay guard: the highest 30 s time step whose
-- code this device has had accepted; only later steps are accepted again.
CREATE TABLE totp_devices (
	id TEXT PRIMARY KEY,
	name TEXT NOT NULL,
	secret_sealed TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	last_used_at INTEGER,
	last_step INTEGER NOT NULL DEFAULT -1
);

-- The one enrollment waiting for its confirm code; a new enroll replaces it.
-- device_id is chosen at enroll so the sealed secret (aad "totp:<id>") moves
-- into totp_devices unchanged.
CREATE TABLE totp_enrollment (
	slot INTEGER PRIMARY KEY CHECK (slot = 1),
	device_id TEXT NOT NULL,
	secret_sealed TEXT NOT NULL,
	expires_at INTEGER NOT NULL
);

-- Backup codes, only as salted argon2id hashes; a used code is deleted.
CREATE TABLE backup_codes (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	code_hash TEXT NOT NULL,
	created_at INTEGER NOT NULL
);

-- Half-done logins: the password was right, the second factor is due. Only
-- the SHA-256 of the pending token is kept.
CREATE TABLE login_pending (
	token_hash TEXT PRIMARY KEY,
	expires_at INTEGER NOT NULL,
	client_addr TEXT NOT NULL DEFAULT ''
);
CREATE INDEX login_pending_expires ON login_pending(expires_at);
