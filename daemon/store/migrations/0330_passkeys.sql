-- Passkeys (WebAuthn), second-factor devices beside the TOTP ones (issue
-- 31): credential is the verified credential as go-webauthn keeps it
-- (JSON: public key, sign count, flags, transports); credential_id is its
-- id, base64url. Ceremonies are the challenges handed out and not yet
-- answered, kept here so that any edge can finish what another began.
CREATE TABLE passkeys (
	id TEXT PRIMARY KEY,
	name TEXT NOT NULL,
	credential_id TEXT NOT NULL UNIQUE,
	credential TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	last_used_at INTEGER
);
CREATE TABLE webauthn_ceremonies (
	id TEXT PRIMARY KEY,
	kind TEXT NOT NULL,
	session TEXT NOT NULL,
	expires_at INTEGER NOT NULL
);
